//! What one node's processes asked their kernel and were told: the model every cluster
//! simulation checks the daemons against. A reply is matched as the kernel matches it (a
//! non-blocking one with the oldest unanswered non-blocking request of the node, in full;
//! a blocking one by its echoed fields), answered at most once, and recorded as the bytes
//! each process holds; CANCEL and CLOSE take effect as they do in the kernel.
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};

use dlm_proto::errno::{EINVAL, ENOENT};
use dlm_proto::kernel::{PlockInfo, PlockOp};

/// What one request is, and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Pending {
    pub(crate) info: PlockInfo,
    pub(crate) replies: u32,
    pub(crate) rv: Option<i32>,
    /// A blocking request whose CANCEL succeeded: it is never answered.
    pub(crate) cancelled: bool,
}

/// One node's processes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Procs {
    /// Requests issued, by serial (a request's `pid` is its serial, but a CANCEL's, which
    /// names the request it cancels).
    pub(crate) requests: BTreeMap<u32, Pending>,
    /// Bytes each (owner, inode) holds according to its replies.
    pub(crate) held: BTreeMap<(u64, u64), u64>,
    /// Of those, the bytes held for writing.
    pub(crate) held_ex: BTreeMap<(u64, u64), u64>,
    /// What the processes believe they hold: granted by a reply, given up as soon as they
    /// ask to unlock (the basis of the no-double-grant check).
    pub(crate) claim: BTreeMap<(u64, u64), (u64, u64)>,
    /// Unanswered non-blocking requests (CLOSEs too), in the order the kernel sent them.
    pub(crate) fifo: VecDeque<u32>,
}

/// Bytes `start..=end` of the first 64 as a bit set.
pub(crate) fn mask(start: u64, end: u64) -> u64 {
    (start..=end.min(63)).fold(0, |m, b| m | 1 << b)
}

impl Procs {
    /// The kernel hands the daemon request `serial`.
    pub(crate) fn asked(&mut self, serial: u32, info: PlockInfo) {
        self.requests.insert(
            serial,
            Pending {
                info,
                replies: 0,
                rv: None,
                cancelled: false,
            },
        );
        if !info.wait {
            // a CLOSE is never answered: it takes effect in its place among this node's
            // non-blocking requests, which is where the model applies it
            self.fifo.push_back(serial);
        }
        let m = mask(info.start, info.end);
        let c = self
            .claim
            .entry((info.owner, info.number))
            .or_insert((0, 0));
        match info.op {
            // the process lets go when it asks
            PlockOp::UNLOCK => {
                c.0 &= !m;
                c.1 &= !m;
            }
            // and writes no more where it asks to read (a read lock over its own write
            // lock is granted, the write lock cut, as soon as the daemon applies it)
            PlockOp::LOCK if !info.ex => c.1 &= !m,
            _ => {}
        }
    }

    /// The serial of `owner`'s blocking request still waiting for its answer, if any (a
    /// process blocked in F_SETLKW does nothing else but be interrupted).
    pub(crate) fn blocked(&self, owner: u64) -> Option<u32> {
        self.requests
            .iter()
            .find(|(_, p)| p.info.owner == owner && p.info.wait && p.replies == 0 && !p.cancelled)
            .map(|(&k, _)| k)
    }

    /// Node `node` wrote `info` to its kernel: checked and recorded.
    pub(crate) fn replied(&mut self, node: u32, info: &PlockInfo, seed: u64) {
        // non-blocking replies come in request order (kernels >= 6.5 match them so);
        // blocking ones are matched by their echoed fields
        let serial = if info.wait {
            // CLOSEs sent before this request took effect before it
            self.drain_closes_before(info.pid);
            info.pid
        } else {
            self.drain_closes(node, false);
            let k = self.fifo.pop_front().unwrap_or_else(|| {
                panic!("seed {seed}: node {node} replied with nothing pending: {info:?}")
            });
            // the request itself comes back (a GET's with the conflicting lock in it)
            let asked = self.requests[&k].info;
            let same = if asked.op == PlockOp::GET {
                let key = |i: &PlockInfo| (i.op, i.owner, i.number, i.fsid);
                key(&asked) == key(info)
            } else {
                PlockInfo {
                    rv: info.rv,
                    ..asked
                } == *info
            };
            assert!(
                same,
                "seed {seed}: node {node} answered out of order: {info:?} for {asked:?}"
            );
            k
        };
        let p = self.requests.get_mut(&serial).unwrap_or_else(|| {
            panic!("seed {seed}: node {node} replied to an unknown request {info:?}")
        });
        p.replies += 1;
        assert_eq!(
            p.replies, 1,
            "seed {seed}: node {node} answered {:?} twice",
            p.info
        );
        assert!(!p.info.flags.close(), "seed {seed}: a CLOSE was answered");
        assert!(
            !p.cancelled,
            "seed {seed}: node {node} answered {:?} after its CANCEL succeeded",
            p.info
        );
        p.rv = Some(info.rv);
        if info.op == PlockOp::CANCEL {
            return self.cancel_answered(node, info, seed);
        }
        self.record(serial, info);
    }

    /// The answer to a CANCEL of blocking request `info.pid`: 0, it was a waiter and never
    /// will be answered; -ENOENT, it was answered already, granted or refused (its answer
    /// came first: a blocking reply leaves at once); -EINVAL, not applied (beside a C
    /// member), it waits on.
    fn cancel_answered(&mut self, node: u32, info: &PlockInfo, seed: u64) {
        let Some(w) = self.requests.get_mut(&info.pid) else {
            panic!("seed {seed}: node {node}: a CANCEL of nothing {info:?}");
        };
        match info.rv {
            0 => {
                assert_eq!(w.replies, 0, "seed {seed}: node {node} cancelled {w:?}");
                w.cancelled = true;
            }
            rv if rv == -ENOENT => assert!(
                w.rv.is_some(),
                "seed {seed}: node {node}: CANCEL found no waiter, but {w:?} was not answered"
            ),
            rv if rv == -EINVAL => {}
            rv => panic!("seed {seed}: node {node}: CANCEL answered {rv}"),
        }
    }

    /// Request `serial`'s answer `info` in the bytes its owner holds.
    fn record(&mut self, serial: u32, info: &PlockInfo) {
        let key = (info.owner, info.number);
        let m = mask(info.start, info.end);
        // bytes the process asked to unlock after this request are not its to claim, nor
        // to write where it asked to read since
        let asked_after = |read: bool| {
            self.requests
                .range(serial + 1..)
                .filter(|(_, p)| (p.info.owner, p.info.number) == key)
                .filter(|(_, p)| match p.info.op {
                    PlockOp::UNLOCK => true,
                    PlockOp::LOCK => read && !p.info.ex,
                    _ => false,
                })
                .fold(0, |a, (_, p)| a | mask(p.info.start, p.info.end))
        };
        let (let_go, no_write) = (asked_after(false), asked_after(true));
        match (info.op, info.rv) {
            (PlockOp::LOCK, 0) => {
                // a later lock or unlock of the owner already answered (a blocking grant
                // overtakes an older non-blocking reply: two threads of one process) set
                // its bytes after this one
                let m = m & !self.touched_after(serial, key);
                let held = self.held.entry(key).or_insert(0);
                let ex = self.held_ex.entry(key).or_insert(0);
                *held |= m;
                if info.ex {
                    *ex |= m
                } else {
                    *ex &= !m
                }
                let c = self.claim.entry(key).or_insert((0, 0));
                c.0 |= m & !let_go;
                if info.ex {
                    c.1 |= m & !no_write
                } else {
                    c.1 &= !m
                }
            }
            (PlockOp::UNLOCK, _) => {
                // a later lock of the owner answered before this unlock (a blocking reply
                // overtakes an older non-blocking one: two threads of one process) took its
                // bytes after the unlock
                let regained = self.answered_after(serial, key).0;
                let held = self.held.entry(key).or_insert(0);
                let ex = self.held_ex.entry(key).or_insert(0);
                *held &= !(m & !regained);
                *ex &= !(m & !regained);
            }
            _ => {}
        }
    }

    /// What the answered requests of owner and file `key` after request `serial` did,
    /// replayed in request order (the daemon's order; their replies may have come in
    /// another): the bytes held and the exclusive ones.
    pub(crate) fn answered_after(&self, serial: u32, key: (u64, u64)) -> (u64, u64) {
        let (mut held, mut ex) = (0u64, 0u64);
        for p in self.requests.range(serial + 1..).map(|(_, p)| p) {
            if (p.info.owner, p.info.number) != key || p.replies == 0 {
                continue;
            }
            let m = mask(p.info.start, p.info.end);
            match (p.info.op, p.rv) {
                (PlockOp::LOCK, Some(0)) => {
                    held |= m;
                    if p.info.ex { ex |= m } else { ex &= !m }
                }
                (PlockOp::UNLOCK, _) => {
                    held &= !m;
                    ex &= !m;
                }
                _ => {}
            }
        }
        (held, ex)
    }

    /// The bytes of `key` that requests of the owner after `serial` and already answered
    /// (a granted lock, an unlock) have set since, in request order.
    fn touched_after(&self, serial: u32, key: (u64, u64)) -> u64 {
        self.requests
            .range(serial + 1..)
            .map(|(_, p)| p)
            .filter(|p| (p.info.owner, p.info.number) == key && p.replies > 0)
            .filter(|p| {
                matches!(
                    (p.info.op, p.rv),
                    (PlockOp::LOCK, Some(0)) | (PlockOp::UNLOCK, _)
                )
            })
            .fold(0, |a, p| a | mask(p.info.start, p.info.end))
    }

    /// CLOSE `serial` takes effect: the owner's bytes on that file are gone, but for what
    /// its later requests already answered did since (a blocking grant may overtake an
    /// older non-blocking reply, and so reach the model before the CLOSE is drained).
    fn close(&mut self, serial: u32) {
        let info = self.requests[&serial].info;
        let key = (info.owner, info.number);
        let (held, ex) = self.answered_after(serial, key);
        self.held.insert(key, held);
        self.held_ex.insert(key, ex);
    }

    /// Applies the CLOSEs at the front of the queue of non-blocking requests (all of them
    /// when the cluster is quiet, when no other request may be left unanswered).
    pub(crate) fn drain_closes(&mut self, node: u32, all: bool) {
        while let Some(&k) = self.fifo.front() {
            let info = self.requests[&k].info;
            if !info.flags.close() {
                assert!(!all, "node {node}: request {info:?} unanswered when quiet");
                return;
            }
            self.fifo.pop_front();
            self.close(k);
        }
    }

    /// Applies the CLOSEs at the front of the queue that were sent before request `limit`.
    fn drain_closes_before(&mut self, limit: u32) {
        while let Some(&k) = self.fifo.front() {
            let info = self.requests[&k].info;
            if k >= limit || !info.flags.close() {
                return;
            }
            self.fifo.pop_front();
            self.close(k);
        }
    }

    /// Blocking requests still unanswered (and not cancelled): each must be a waiter.
    pub(crate) fn waiting(&self) -> impl Iterator<Item = &Pending> + '_ {
        self.requests
            .values()
            .filter(|p| p.info.wait && p.replies == 0 && !p.cancelled && p.info.op == PlockOp::LOCK)
    }

    /// Non-blocking requests (not CLOSEs) still unanswered.
    pub(crate) fn unanswered(&self) -> impl Iterator<Item = &Pending> + '_ {
        self.requests
            .values()
            .filter(|p| !p.info.wait && !p.info.flags.close() && p.replies == 0)
    }

    /// The requests of `owner` on `number`, one line each (a failure's history).
    pub(crate) fn history(&self, owner: u64, number: u64) -> String {
        self.requests
            .values()
            .filter(|p| p.info.owner == owner && p.info.number == number)
            .map(|p| {
                format!(
                    "#{} {:?} {}-{} ex {} wait {} close {} -> {:?}{}\n",
                    p.info.pid,
                    p.info.op,
                    p.info.start,
                    p.info.end,
                    p.info.ex,
                    p.info.wait,
                    p.info.flags.close(),
                    p.rv,
                    if p.cancelled { " cancelled" } else { "" }
                )
            })
            .collect()
    }
}

/// What the processes of `nodes` were told they hold never conflicts (no range is granted
/// twice): `Err` names the clash.
pub(crate) fn grants_clash<'a>(
    nodes: impl Iterator<Item = (u32, &'a Procs)>,
) -> Result<(), String> {
    let mut all: Vec<(u32, u64, u64, u64, u64)> = Vec::new(); // node, owner, inode, held, ex
    let mut procs = BTreeMap::new();
    for (id, p) in nodes {
        procs.insert(id, p);
        for (&(owner, ino), &(bits, ex)) in &p.claim {
            all.push((id, owner, ino, bits, ex));
        }
    }
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            if a.2 != b.2 || (a.0, a.1) == (b.0, b.1) {
                continue;
            }
            let clash = (a.4 & b.3) | (b.4 & a.3);
            if clash != 0 {
                return Err(format!(
                    "node {} owner {} and node {} owner {} were both granted bytes {clash:#b} \
                     of inode {}\n{}{}",
                    a.0,
                    a.1,
                    b.0,
                    b.1,
                    a.2,
                    procs[&a.0].history(a.1, a.2),
                    procs[&b.0].history(b.1, b.2)
                ));
            }
        }
    }
    Ok(())
}

/// No two granted locks of different owners in one table overlap with one of them a write
/// lock: `Err` names them.
pub(crate) fn table_clash(table: &dlm_plock::Lockspace) -> Result<(), String> {
    let entries: Vec<_> = table.dump(0).filter(|e| !e.waiting).collect();
    for (i, a) in entries.iter().enumerate() {
        for b in &entries[i + 1..] {
            let same_owner = a.nodeid == b.nodeid && a.owner == b.owner;
            let overlap = a.number == b.number && !(a.end < b.start || a.start > b.end);
            if !same_owner && overlap && (a.ex || b.ex) {
                return Err(format!("conflicting locks {a:?} and {b:?}"));
            }
        }
    }
    Ok(())
}
