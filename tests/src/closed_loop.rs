//! The plock workload driver of the side-by-side benches (`vs_c`, `vs_c3`): simulated
//! processes on one fake kernel, each with one request outstanding (closed loop), following
//! a script of requests. Latencies, ops, and non-blocking replies that came out of the
//! order they were sent in (the kernel's matching; must be 0).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};

use crate::FakeKernel;

/// What a process asks at one step of its script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// LOCK or UNLOCK.
    pub op: PlockOp,
    /// Inode.
    pub number: u64,
    /// First byte.
    pub start: u64,
    /// Last byte.
    pub end: u64,
    /// F_SETLKW (LOCK only).
    pub wait: bool,
}

/// A workload: process `p`'s request at step `n` (0, 1, …).
pub trait Script: Sync {
    /// The request; owners and pids are the driver's.
    fn step(&self, p: u64, n: u64) -> Step;
}

/// Lock then unlock one lock, for ever: (inode, start, end, wait) of process `p`.
#[derive(Debug)]
pub struct LockUnlock<F>(pub F);

impl<F: Fn(u64, u64) -> (u64, u64, u64, bool) + Sync> Script for LockUnlock<F> {
    fn step(&self, p: u64, n: u64) -> Step {
        let (number, start, end, wait) = (self.0)(p, n / 2);
        Step {
            op: if n % 2 == 0 {
                PlockOp::LOCK
            } else {
                PlockOp::UNLOCK
            },
            number,
            start,
            end,
            wait: wait && n % 2 == 0,
        }
    }
}

/// What one drive measured.
#[derive(Debug, Clone, Default)]
pub struct Drive {
    /// Replies within the measured time.
    pub ops: u64,
    /// Their latencies.
    pub latencies: Vec<Duration>,
    /// Non-blocking replies out of send order.
    pub out_of_order: u64,
}

/// The request of `step` for owner `owner` in lockspace `fsid`.
pub fn request(fsid: u32, owner: u64, s: Step) -> PlockInfo {
    PlockInfo {
        version: PLOCK_VERSION,
        op: s.op,
        ex: true,
        wait: s.wait,
        flags: PlockFlags(0),
        pid: u32::try_from(owner).unwrap_or(0),
        nodeid: 0,
        rv: 0,
        fsid,
        number: s.number,
        start: s.start,
        end: s.end,
        owner,
    }
}

/// Runs `procs` processes (owners `first..first+procs`) through `script` for `secs`; then
/// the drain, not counted: each process, at its next reply, unlocks everything it has on
/// that inode and stops. `None` if the daemon stopped answering (5 s without a reply).
pub fn drive(
    k: &FakeKernel,
    fsid: u32,
    script: &dyn Script,
    first: u64,
    procs: u64,
    secs: f64,
) -> Option<Drive> {
    // per process: when its request left, its step, and whether it is in its last unlock
    let mut at: BTreeMap<u64, (Instant, u64, bool)> = BTreeMap::new();
    // non-blocking requests in the order sent: their replies must come in that order
    let mut order: VecDeque<(u64, PlockOp)> = VecDeque::new();
    let send = |info: PlockInfo, order: &mut VecDeque<(u64, PlockOp)>| {
        if !info.wait {
            order.push_back((info.owner, info.op));
        }
        k.send_plock(&info).ok()
    };
    for p in 0..procs {
        let s = script.step(p, 0);
        send(request(fsid, first + p, s), &mut order)?;
        at.insert(first + p, (Instant::now(), 0, false));
    }
    let mut d = Drive::default();
    let t0 = Instant::now();
    while !at.is_empty() {
        let r = k.recv_plock(Duration::from_secs(5))?;
        if !r.wait {
            match order.iter().position(|&(o, op)| o == r.owner && op == r.op) {
                Some(0) => {
                    order.pop_front();
                }
                Some(i) => {
                    d.out_of_order += 1;
                    order.remove(i);
                }
                None => {}
            }
        }
        let Some((t, n, last)) = at.remove(&r.owner) else {
            continue;
        };
        if last {
            continue;
        }
        let p = r.owner - first;
        if t0.elapsed().as_secs_f64() >= secs {
            let s = Step {
                op: PlockOp::UNLOCK,
                number: r.number,
                start: 0,
                end: u64::MAX,
                wait: false,
            };
            send(request(fsid, r.owner, s), &mut order)?;
            at.insert(r.owner, (Instant::now(), n + 1, true));
            continue;
        }
        d.latencies.push(t.elapsed());
        d.ops += 1;
        let s = script.step(p, n + 1);
        send(request(fsid, r.owner, s), &mut order)?;
        at.insert(r.owner, (Instant::now(), n + 1, false));
    }
    Some(d)
}

/// The `m`‰ latency in µs of sorted `lat`.
pub fn permille_us(lat: &[Duration], m: usize) -> f64 {
    lat.get((lat.len().max(1) - 1) * m / 1000)
        .map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

/// `dlm_tool ls`'s first query (LOCKSPACES) on the raw query socket of network namespace
/// `netns`, every 2 ms until `stop`: the latencies of those answered (a query is one
/// connection, as `dlm_tool` makes it; no process start).
pub fn probe_queries(netns: &str, stop: &std::sync::atomic::AtomicBool) -> Vec<Duration> {
    use std::io::{Read, Write};
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};
    use std::sync::atomic::Ordering;

    use dlm_proto::query::{Command, DlmcHeader, QUERY_SOCK_NAME};
    let mut out = Vec::new();
    if crate::enter_netns(netns).is_err() {
        return out;
    }
    let mut h = DlmcHeader::new(Command::LOCKSPACES);
    h.data = 128;
    let bytes = h.encode();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let answered = SocketAddr::from_abstract_name(QUERY_SOCK_NAME)
            .and_then(|a| UnixStream::connect_addr(&a))
            .and_then(|mut s| {
                s.write_all(&bytes)?;
                let mut buf = Vec::with_capacity(4096);
                s.read_to_end(&mut buf)
            });
        if answered.is_ok() {
            out.push(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    out
}
