//! The plock table of one lockspace and the application of delivered PLOCK messages.
//!
//! Every decision mirrors plock.c of dlm 4.1/4.2 (see the function named in each comment);
//! only the data structures differ:
//!
//! * resources: a slab found through a hash table of slot numbers by inode number (O(1)),
//!   linked in creation order (C's `plock_resources` list, which dumps and state transfer
//!   follow). A resource holding one granted lock and no waiter — nearly every inode a file
//!   system locks — keeps that lock inline in its 72-byte slot ([`Body::One`]); any other
//!   resource has a boxed [`Full`] with the indexes below. A resource changes form only
//!   inside an operation: `promote` before the general code runs, `settle` after it.
//! * locks and waiters of a [`Full`] resource: an [`Arena`] interval index plus insertion
//!   order, so a conflict check, lock or unlock touches O(log n + k) entries, never the
//!   whole list;
//! * waiters: C's single FIFO pass after every LOCK/UNLOCK examines all W waiters against
//!   all L locks. Here a waiter is examined only if it is a *candidate*: a waiter that has not
//!   been seen to conflict since the last change of the granted set near it. A waiter that
//!   conflicted keeps conflicting until a lock overlapping it is removed, shrunk or downgraded,
//!   and every such change marks the waiters overlapping the changed range as candidates
//!   again. Candidates are examined in FIFO order in one pass, with waiters behind the cursor
//!   left for the next pass — so the decisions, including the single-pass anomaly, are C's.
//!   A waiter carries its candidate flag; the resource keeps a min-heap of the candidates'
//!   FIFO positions, except when every waiter is a candidate (processes queued on one
//!   range, after an unlock): then no entry is made and the pass walks the FIFO list as C
//!   does. A candidate that the pass's last grant blocks is passed over without a search
//!   of the locks.
//! * purging a node visits only the resources it used: a per-node list through the slots of
//!   its one-lock resources, and a `(nodeid, creation position)` index of the others.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};

use crate::arena::{Arena, ListHead, Slot, mix64};
use crate::effects::{ApplyError, Reply, RestoreError};
use crate::range::{Overlap, overlap_type, shrink};

mod deadlock;
mod locks;
pub(crate) mod state;
mod table;
#[cfg(test)]
mod tests;

const NIL: u32 = u32::MAX;
use dlm_proto::errno::{EAGAIN, EDEADLK, EINVAL, ENOENT};

/// A granted lock (C's `struct posix_lock`); its range lives beside it (arena node or
/// inline slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lock {
    pub(crate) owner: u64,
    pub(crate) nodeid: i32,
    pub(crate) pid: u32,
    /// Local time (whole seconds of the `now` clock) this fragment's coverage was granted;
    /// not replicated. Seconds keep it in 32 bits for 136 years of uptime.
    pub(crate) since: u32,
    pub(crate) ex: bool,
}

impl Lock {
    /// Milliseconds since granted, to the second.
    pub(crate) fn age_ms(&self, now: u64) -> u64 {
        now.saturating_sub(u64::from(self.since) * 1000)
    }
}

/// The `since` of a lock granted at `now` (milliseconds).
fn secs(now: u64) -> u32 {
    u32::try_from(now / 1000).unwrap_or(u32::MAX)
}

/// A blocked LOCK (C's `struct lock_waiter`): the whole request, echoed when granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waiter {
    pub(crate) info: PlockInfo,
    /// Local time (ms) it started waiting; not replicated.
    pub(crate) since: u64,
    /// To be examined at the next pass (a candidate).
    pub(crate) candidate: bool,
}

/// Waiter bookkeeping that only exists while a resource has waiters.
#[derive(Debug, Default, Clone)]
pub(crate) struct WaiterIndex {
    /// Waiters to examine at the next pass: a min-heap of (FIFO position, slot), one entry
    /// per waiter whose `candidate` flag is set (unless `unindexed`). An entry whose waiter
    /// was deleted stays until a pass pops it and finds the slot no longer holds that
    /// waiter; every pass empties the heap but for the candidates it leaves behind, so it
    /// never holds more entries than the resource has had waiters since its last pass.
    candidates: BinaryHeap<Reverse<(u32, Slot)>>,
    /// How many waiters of the resource have their `candidate` flag set.
    marked: u32,
    /// Whether the resource's number is in the table's `dirty` set.
    listed: bool,
    /// Some candidates have no heap entry (a release reached every waiter, for a pass that
    /// walks the list): a pass from the heap makes their entries first.
    unindexed: bool,
    /// (nodeid, owner, FIFO position, slot): an owner's waiters, for UNLOCK+CLOSE.
    by_owner: BTreeSet<(i32, u64, u32, Slot)>,
}

/// How many locks and waiters each node has in one resource. Most resources are used by one
/// node, so that case is inline and the global `(nodeid, creation)` index changes only when
/// a node's count goes from 0 to 1 or back.
#[derive(Debug, Clone, Default)]
enum NodeCounts {
    #[default]
    Empty,
    One(i32, u32),
    #[allow(clippy::box_collection)] // keeps every resource 8 bytes smaller
    Many(Box<BTreeMap<i32, u32>>),
}

impl NodeCounts {
    /// Counts one more entry of `nodeid`; true when it is the node's first.
    fn inc(&mut self, nodeid: i32) -> bool {
        match self {
            Self::Empty => {
                *self = Self::One(nodeid, 1);
                true
            }
            Self::One(n, c) if *n == nodeid => {
                *c += 1;
                false
            }
            Self::One(n, c) => {
                let map = BTreeMap::from([(*n, *c), (nodeid, 1)]);
                *self = Self::Many(Box::new(map));
                true
            }
            Self::Many(map) => {
                let c = map.entry(nodeid).or_insert(0);
                *c += 1;
                *c == 1
            }
        }
    }

    /// Counts one entry of `nodeid` less; true when it was the node's last.
    fn dec(&mut self, nodeid: i32) -> bool {
        match self {
            Self::One(n, c) if *n == nodeid => {
                *c -= 1;
                if *c == 0 {
                    *self = Self::Empty;
                    return true;
                }
                false
            }
            Self::Many(map) => match map.get_mut(&nodeid) {
                Some(c) if *c > 1 => {
                    *c -= 1;
                    false
                }
                Some(_) => {
                    map.remove(&nodeid);
                    true
                }
                None => false,
            },
            _ => false,
        }
    }
}

/// A resource's only granted lock, when it has no waiter: inline in the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OneLock {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) lock: Lock,
}

/// The indexes of a resource that is not a single lock.
#[derive(Debug, Clone, Default)]
pub(crate) struct Full {
    pub(crate) locks: ListHead,
    pub(crate) waiters: ListHead,
    windex: Option<Box<WaiterIndex>>,
    nodes: NodeCounts,
}

impl Full {
    fn is_empty(&self) -> bool {
        self.locks.is_empty() && self.waiters.is_empty()
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Body {
    One(OneLock),
    Full(Box<Full>),
}

#[derive(Debug, Clone)]
pub(crate) struct Resource {
    pub(crate) number: u64,
    /// Position in creation order (C's resource list), for purge's visiting order.
    created: u32,
    prev: u32,
    next: u32,
    /// The per-node list of one-lock resources (of the lock's node).
    node_prev: u32,
    node_next: u32,
    pub(crate) body: Body,
}

/// The identity a lock belongs to (section 2.3): the pid is informational only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Req {
    nodeid: i32,
    owner: u64,
    pid: u32,
    ex: bool,
    start: u64,
    end: u64,
}

impl From<&PlockInfo> for Req {
    fn from(i: &PlockInfo) -> Self {
        Self {
            nodeid: i.nodeid,
            owner: i.owner,
            pid: i.pid,
            ex: i.ex,
            start: i.start,
            end: i.end,
        }
    }
}

/// The replicated plock table of one lockspace, as seen from node `our_nodeid`.
///
/// Inputs: [`Lockspace::apply`] for every PLOCK message in CPG delivery order,
/// [`Lockspace::purge_node`] at a membership change, [`Lockspace::restore`] for state
/// transfer. Outputs: the [`Reply`]s pushed into the caller's vector, which the daemon writes
/// to the kernel. Time (`now`, monotonic milliseconds) is only recorded for ages in dumps.
#[derive(Debug, Clone)]
pub struct Lockspace {
    our_nodeid: i32,
    fsid: u32,
    pub(crate) locks: Arena<Lock>,
    pub(crate) waiters: Arena<Waiter>,
    resources: Vec<Option<Resource>>,
    free_resources: Vec<u32>,
    /// Resource slots, found by inode number (4 bytes and a control byte per bucket; a map
    /// keyed by number would store the number twice).
    by_number: hashbrown::HashTable<u32>,
    /// Keys `by_number`'s hash.
    hash_key: u64,
    head: u32,
    tail: u32,
    /// (nodeid, creation position, slot) for every `Full` resource where the node has a lock
    /// or a waiter: a purge walks them in creation order (C's) without lookups.
    by_node: BTreeSet<(i32, u32, u32)>,
    /// Per node, the first of its one-lock resources (a list through their slots).
    node_lists: BTreeMap<i32, u32>,
    /// Resources with one inline lock.
    ones: usize,
    /// Granted lock fragments of `our_nodeid`'s processes, inline or in the arena.
    our_locks: usize,
    /// Resources with candidates left for a later pass (put back behind a pass, or
    /// restored): a purge runs their pass.
    dirty: BTreeSet<u64>,
    next_created: u32,
    scratch: Vec<Slot>,
    /// The waiters a release found (`release`), kept between calls.
    waiter_scratch: Vec<Slot>,
    /// Every waiter by its owner, in replicated order (nodeid, owner, number, start, end,
    /// ex: all a conflict depends on, so waiters equal up to here block alike), then its
    /// resource and slot (which differ between replicas): what an owner waits for.
    waiting: BTreeSet<WaitKey>,
    /// A blocking LOCK that would close a cycle of waiting owners is answered -EDEADLK
    /// (agreed by every member: see [`Lockspace::set_deadlock_detect`]).
    deadlock_detect: bool,
}

/// (nodeid, owner, number, start, end, ex, resource, slot) of a waiter.
type WaitKey = (i32, u64, u64, u64, u64, bool, u32, Slot);

impl Lockspace {
    /// An empty table for the lockspace whose global id is `fsid`, on node `our_nodeid`.
    ///
    /// `seed` keys the shapes of its indexes (treap priorities, the slot table's hash) and
    /// nothing else: replicas with different seeds make the same decisions, replies, dumps
    /// and digests. A daemon draws it at random per process, so no user can choose inputs
    /// that degrade the indexes of every node at once.
    pub fn new(our_nodeid: u32, fsid: u32, seed: u64) -> Self {
        Self {
            our_nodeid: i32::try_from(our_nodeid).unwrap_or(i32::MAX),
            fsid,
            locks: Arena::new(mix64(seed ^ 1)),
            waiters: Arena::new(mix64(seed ^ 2)),
            hash_key: mix64(seed),
            resources: Vec::new(),
            free_resources: Vec::new(),
            by_number: hashbrown::HashTable::new(),
            head: NIL,
            tail: NIL,
            by_node: BTreeSet::new(),
            node_lists: BTreeMap::new(),
            ones: 0,
            our_locks: 0,
            dirty: BTreeSet::new(),
            next_created: 0,
            scratch: Vec::new(),
            waiter_scratch: Vec::new(),
            waiting: BTreeSet::new(),
            deadlock_detect: false,
        }
    }

    /// The depth of the lock index of resource `number` (0 for none or an inline lock).
    #[cfg(test)]
    pub(crate) fn lock_depth(&self, number: u64) -> usize {
        match self.find(number).map(|r| &self.res(r).body) {
            Some(Body::Full(f)) => self.locks.depth(&f.locks),
            _ => 0,
        }
    }

    /// This node's id.
    pub fn our_nodeid(&self) -> u32 {
        u32::try_from(self.our_nodeid).unwrap_or(0)
    }

    /// The lockspace global id.
    pub fn fsid(&self) -> u32 {
        self.fsid
    }

    /// Resources in the table.
    pub fn resource_count(&self) -> usize {
        self.by_number.len()
    }

    /// Granted lock fragments in the table.
    pub fn lock_count(&self) -> usize {
        self.locks.live() + self.ones
    }

    /// Granted lock fragments held by this node's processes (O(1)): what a node bounds
    /// before it asks for more (`plock_locks_max` in the daemon).
    pub fn our_lock_count(&self) -> usize {
        self.our_locks
    }

    /// Waiters in the table.
    pub fn waiter_count(&self) -> usize {
        self.waiters.live()
    }

    /// When the longest-waiting waiter started waiting (local monotonic ms), if any. Scans
    /// the waiters (not the locks): for scrapes and queries, not the hot path.
    pub fn oldest_waiter_since(&self) -> Option<u64> {
        self.waiters.values().map(|w| w.since).min()
    }

    /// Who blocks whom ([`crate::waits`]) among the resources that have waiters, from at
    /// most `max_entries` dump lines (a walk of a huge table is bounded: past the bound the
    /// picture is of the first resources only).
    pub fn waits(&self, now: u64, max_entries: usize) -> crate::Waits {
        let numbers: BTreeSet<u64> = self.waiting.iter().map(|k| k.2).collect();
        let mut entries = Vec::new();
        for n in numbers {
            let room = max_entries.saturating_sub(entries.len());
            if room == 0 {
                break;
            }
            entries.extend(self.dump_of(n, now).take(room));
        }
        crate::waits::waits(&entries)
    }

    /// Bytes held by the table's own structures (slabs and tables exactly, B-trees
    /// estimated).
    pub fn approx_heap_bytes(&self) -> usize {
        // B-tree entries cost their size plus roughly half again in node slack and edges.
        let map = |entry: usize, n: usize| n * entry * 3 / 2;
        let fulls = self.by_number.len() - self.ones;
        self.locks.heap_bytes()
            + self.waiters.heap_bytes()
            + self.resources.capacity() * size_of::<Option<Resource>>()
            + self.free_resources.capacity() * size_of::<u32>()
            + fulls * size_of::<Full>()
            // buckets of 4 bytes and a control byte each
            + self.by_number.capacity() * (size_of::<u32>() + 1)
            + map(size_of::<(i32, u32, u32)>(), self.by_node.len())
            + map(size_of::<(i32, u32)>(), self.node_lists.len())
    }

    // ---- delivered messages --------------------------------------------------------

    /// Applies one delivered PLOCK message from CPG node `from` (`_receive_plock`, default
    /// mode). Replies for requests this node issued are pushed onto `out`.
    pub fn apply(
        &mut self,
        now: u64,
        from: u32,
        info: &PlockInfo,
        out: &mut Vec<Reply>,
    ) -> Result<(), ApplyError> {
        if i64::from(info.nodeid) != i64::from(from) {
            return Err(ApplyError::NodeMismatch {
                claimed: info.nodeid,
                sender: from,
            });
        }
        let ours = info.nodeid == self.our_nodeid;
        let reply = |rv: i32| Reply {
            info: PlockInfo { rv, ..*info },
        };
        match info.op {
            PlockOp::LOCK => self.do_lock(now, info, out),
            PlockOp::UNLOCK => self.do_unlock(now, info, out),
            PlockOp::GET => {
                // only the originator evaluates a GET
                if ours {
                    out.push(self.do_get(info));
                }
            }
            PlockOp::CANCEL => {
                let rv = self.do_cancel(info);
                if ours {
                    out.push(reply(rv));
                }
            }
            _ => {
                // unknown op: -EINVAL to the originator; unlike C, no resource is leaked
                if ours {
                    out.push(reply(-EINVAL));
                }
            }
        }
        Ok(())
    }

    /// `do_lock`.
    fn do_lock(&mut self, now: u64, info: &PlockInfo, out: &mut Vec<Reply>) {
        let req = Req::from(info);
        let ours = info.nodeid == self.our_nodeid;
        let Some(r) = self.find(info.number) else {
            // a new resource: nothing to conflict with, no own fragment, no waiter, so C's
            // path grants one lock; it is created in the inline form directly
            let lock = Lock {
                owner: req.owner,
                nodeid: req.nodeid,
                pid: req.pid,
                since: secs(now),
                ex: req.ex,
            };
            let one = OneLock {
                start: req.start,
                end: req.end,
                lock,
            };
            self.create(info.number, Body::One(one));
            if ours {
                out.push(Reply {
                    info: PlockInfo { rv: 0, ..*info },
                });
            }
            return;
        };
        self.promote(r);
        if let Some(blocker) = self.first_conflict(r, &req) {
            if info.wait && self.deadlock_detect && self.would_deadlock(&req, blocker) {
                if ours {
                    out.push(Reply {
                        info: PlockInfo {
                            rv: -EDEADLK,
                            ..*info
                        },
                    });
                }
            } else if info.wait {
                self.add_waiter(r, *info, now, false);
            } else if ours {
                out.push(Reply {
                    info: PlockInfo {
                        rv: -EAGAIN,
                        ..*info
                    },
                });
            }
        } else {
            let released = self.lock_internal(r, &req, now);
            if let Some(range) = released {
                self.release(r, range);
            }
            if ours {
                out.push(Reply {
                    info: PlockInfo { rv: 0, ..*info },
                });
            }
        }
        self.do_waiters(r, now, out);
        self.settle(r);
    }

    /// `do_unlock`.
    fn do_unlock(&mut self, now: u64, info: &PlockInfo, out: &mut Vec<Reply>) {
        let ours = info.nodeid == self.our_nodeid;
        let answer = |out: &mut Vec<Reply>| {
            if ours && !info.flags.close() {
                out.push(Reply {
                    info: PlockInfo { rv: 0, ..*info },
                });
            }
        };
        let Some(r) = self.find(info.number) else {
            // C creates the resource, finds nothing to unlock, replies 0 and frees it
            answer(out);
            return;
        };
        let req = Req::from(info);
        if let Body::One(o) = self.res(r).body {
            // the inline lock and no waiter: unlock_internal on one fragment, no waiter
            // pass (there is none), CLOSE has no waiter to clear
            let own = o.lock.nodeid == req.nodeid
                && o.lock.owner == req.owner
                && !(req.end < o.start || req.start > o.end);
            let kind = own.then(|| overlap_type(req.start, req.end, o.start, o.end));
            match kind {
                None => {}
                Some(Overlap::Same | Overlap::Covers) => self.free_resource(r),
                Some(Overlap::InsideEdge | Overlap::Partial) => {
                    let (a, b) = shrink(o.start, o.end, req.start, req.end);
                    if let Body::One(o) = &mut self.res_mut(r).body {
                        o.start = a;
                        o.end = b;
                    }
                }
                Some(Overlap::Inside) => {
                    // two fragments: the general form
                    self.promote(r);
                    self.unlock_internal(r, &req);
                    self.settle(r);
                }
            }
            answer(out);
            return;
        }
        if let Some(range) = self.unlock_internal(r, &req) {
            self.release(r, range);
        }
        if info.flags.close() {
            self.clear_waiters(r, info.nodeid, info.owner);
        }
        answer(out);
        self.do_waiters(r, now, out);
        self.settle(r);
    }

    /// `do_get`: reports the first conflicting fragment in list order.
    fn do_get(&mut self, info: &PlockInfo) -> Reply {
        let mut rep = *info;
        rep.rv = 0;
        let req = Req::from(info);
        let hit = match self.find(info.number) {
            None => None,
            Some(r) => match self.res(r).body {
                Body::One(o) => (!(req.end < o.start || req.start > o.end)
                    && conflicts(&req, &o.lock))
                .then_some((o.start, o.end, o.lock)),
                Body::Full(_) => self.first_conflict(r, &req).map(|s| {
                    let (start, end) = self.locks.range(s);
                    (start, end, *self.locks.get(s))
                }),
            },
        };
        if let Some((start, end, l)) = hit {
            rep.ex = l.ex;
            rep.pid = l.pid;
            rep.start = start;
            rep.end = end;
            rep.rv = 1;
        }
        Reply { info: rep }
    }

    /// An UNLOCK of `info`'s range would cut one of its owner's fragments in two: the one
    /// way an unlock adds a lock. Walks the fragments overlapping the range (for a node at
    /// its bound, not the hot path).
    pub fn unlock_splits(&self, info: &PlockInfo) -> bool {
        let Some(r) = self.find(info.number) else {
            return false;
        };
        let cuts = |start: u64, end: u64, l: &Lock| {
            l.nodeid == info.nodeid
                && l.owner == info.owner
                && matches!(
                    overlap_type(info.start, info.end, start, end),
                    Overlap::Inside
                )
        };
        match &self.res(r).body {
            Body::One(o) => cuts(o.start, o.end, &o.lock),
            Body::Full(f) => {
                let mut found = Vec::new();
                self.locks
                    .overlapping(&f.locks, info.start, info.end, &mut found);
                found.into_iter().any(|s| {
                    let (start, end) = self.locks.range(s);
                    cuts(start, end, self.locks.get(s))
                })
            }
        }
    }

    /// CANCEL (upstream, after 4.2): removes the first waiter equal on nodeid, fsid,
    /// number, owner, pid, start, end and ex. No waiter pass.
    fn do_cancel(&mut self, info: &PlockInfo) -> i32 {
        let Some(r) = self.find(info.number) else {
            return -ENOENT;
        };
        let list = match &self.res(r).body {
            // no waiter to cancel
            Body::One(_) => return -ENOENT,
            Body::Full(f) => f.waiters,
        };
        let mut found = Vec::new();
        self.waiters
            .overlapping(&list, info.start, info.end, &mut found);
        let hit = found
            .into_iter()
            .filter(|&s| {
                let w = &self.waiters.get(s).info;
                w.nodeid == info.nodeid
                    && w.fsid == info.fsid
                    && w.number == info.number
                    && w.owner == info.owner
                    && w.pid == info.pid
                    && w.start == info.start
                    && w.end == info.end
                    && w.ex == info.ex
            })
            .min_by_key(|&s| self.waiters.seq(s));
        let rv = match hit {
            Some(s) => {
                self.del_waiter(r, s);
                0
            }
            None => -ENOENT,
        };
        self.settle(r);
        rv
    }

    /// `purge_plocks` for a node that left or failed: removes its locks and waiters, then
    /// runs the waiter pass on every resource that may have grantable waiters. Replies for
    /// this node's granted waiters are pushed onto `out`.
    pub fn purge_node(&mut self, now: u64, nodeid: u32, out: &mut Vec<Reply>) -> usize {
        self.purge_node_but(now, nodeid, |_| false, out)
    }

    /// [`Self::purge_node`], but resources for which `leave(number)` holds get no waiter
    /// pass (native mode: another node decides them, and this replica's copy may be older
    /// than the owner's); their owner's give-back runs it ([`Self::pass`]).
    pub fn purge_node_but(
        &mut self,
        now: u64,
        nodeid: u32,
        leave: impl Fn(u64) -> bool,
        out: &mut Vec<Reply>,
    ) -> usize {
        let nodeid = i32::try_from(nodeid).unwrap_or(i32::MAX);
        let mut purged = 0;
        // its one-lock resources go with their lock; they have no waiter, so this grants
        // nothing and the order among them does not matter
        while let Some(&r) = self.node_lists.get(&nodeid) {
            self.free_resource(r);
            purged += 1;
        }
        // C visits its resource list in creation order; grants (replies) follow that order.
        // The per-node index is kept in creation order with the slots, so no lookups.
        let mut slots: BTreeSet<(u32, u32)> = self
            .by_node
            .range((nodeid, 0, 0)..=(nodeid, u32::MAX, u32::MAX))
            .map(|&(_, created, r)| (created, r))
            .collect();
        for n in &self.dirty {
            if let Some(r) = self.find(*n) {
                slots.insert((self.res(r).created, r));
            }
        }
        for (_, r) in slots {
            if matches!(self.res(r).body, Body::One(_)) {
                continue;
            }
            let list = self.full(r).locks;
            let locks: Vec<Slot> = self
                .locks
                .iter(&list)
                .filter(|&s| self.locks.get(s).nodeid == nodeid)
                .collect();
            for s in locks {
                let range = self.locks.range(s);
                self.del_lock(r, s);
                self.release(r, range);
                purged += 1;
            }
            let waiters: Vec<Slot> = match self.full(r).windex.as_ref() {
                Some(wi) => wi
                    .by_owner
                    .range((nodeid, 0, 0, 0)..=(nodeid, u64::MAX, u32::MAX, Slot::MAX))
                    .map(|e| e.3)
                    .collect(),
                None => Vec::new(),
            };
            for s in waiters {
                self.del_waiter(r, s);
                purged += 1;
            }
            if !self.full(r).waiters.is_empty() && !leave(self.res(r).number) {
                self.do_waiters(r, now, out);
            }
            self.settle(r);
        }
        purged
    }

    /// Adds a restored granted lock or waiter at the tail of the promoted resource `r`
    /// (`receive_plocks_data`); waiters become candidates so the next pass examines them,
    /// as C's next `do_waiters` would.
    pub(crate) fn restore_entry(
        &mut self,
        r: u32,
        entry: &dlm_proto::wire::PlockData,
        nodeid: i32,
        now: u64,
    ) {
        if entry.waiter {
            let info = PlockInfo {
                version: PLOCK_VERSION,
                op: PlockOp::LOCK,
                ex: entry.ex,
                wait: true,
                flags: PlockFlags(0),
                pid: entry.pid,
                nodeid,
                rv: 0,
                fsid: self.fsid,
                number: self.res(r).number,
                start: entry.start,
                end: entry.end,
                owner: entry.owner,
            };
            self.add_waiter(r, info, now, true);
        } else {
            let req = Req {
                nodeid,
                owner: entry.owner,
                pid: entry.pid,
                ex: entry.ex,
                start: entry.start,
                end: entry.end,
            };
            self.add_lock(r, &req, entry.ex, entry.start, entry.end, secs(now));
        }
    }
}

/// Whether granted lock `l` conflicts with `req` (they overlap): another owner, and one of
/// them is a write lock.
fn conflicts(req: &Req, l: &Lock) -> bool {
    !(l.nodeid == req.nodeid && l.owner == req.owner) && (req.ex || l.ex)
}
