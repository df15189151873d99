//! The plock table of one lockspace and the application of delivered PLOCK messages.
//!
//! Every decision mirrors plock.c of dlm 4.1/4.2 (see the function named in each comment);
//! only the data structures differ:
//!
//! * resources: a slab addressed through a `BTreeMap` by number (O(log R)), linked in
//!   creation order (C's `plock_resources` list, which dumps and state transfer follow);
//! * locks and waiters of a resource: an [`Arena`] interval index plus insertion order, so a
//!   conflict check, lock or unlock touches O(log n + k) entries, never the whole list;
//! * waiters: C's single FIFO pass after every LOCK/UNLOCK examines all W waiters against
//!   all L locks. Here a waiter is examined only if it is a *candidate*: a waiter that has not
//!   been seen to conflict since the last change of the granted set near it. A waiter that
//!   conflicted keeps conflicting until a lock overlapping it is removed, shrunk or downgraded,
//!   and every such change marks the waiters overlapping the changed range as candidates
//!   again. Candidates are examined in FIFO order in one pass, with waiters behind the cursor
//!   left for the next pass — so the decisions, including the single-pass anomaly, are C's.
//! * a `(nodeid, number)` index so purging a node visits only the resources it used.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasherDefault;

use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};

use crate::arena::{Arena, ListHead, Slot};
use crate::effects::{ApplyError, Reply};
use crate::range::{Overlap, overlap_type, shrink};

const NIL: u32 = u32::MAX;
const EAGAIN: i32 = 11;
const ENOENT: i32 = 2;
const EINVAL: i32 = 22;

/// A granted lock (C's `struct posix_lock`); its range lives in the arena node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lock {
    pub(crate) owner: u64,
    pub(crate) nodeid: i32,
    pub(crate) pid: u32,
    pub(crate) ex: bool,
    /// Local time (ms) this fragment's coverage was granted; not replicated.
    pub(crate) since: u64,
}

/// A blocked LOCK (C's `struct lock_waiter`): the whole request, echoed when granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waiter {
    pub(crate) info: PlockInfo,
    /// Local time (ms) it started waiting; not replicated.
    pub(crate) since: u64,
}

/// Waiter bookkeeping that only exists while a resource has waiters.
#[derive(Debug, Default, Clone)]
pub(crate) struct WaiterIndex {
    /// Waiters to examine at the next pass, by FIFO position.
    candidates: BTreeMap<u64, Slot>,
    /// (nodeid, owner, FIFO position, slot): an owner's waiters, for UNLOCK+CLOSE.
    by_owner: BTreeSet<(i32, u64, u64, Slot)>,
}

/// How many locks and waiters each node has in one resource. Nearly every resource is used
/// by one node, so that case is inline and the global `(nodeid, number)` index changes only
/// when a node's count goes from 0 to 1 or back.
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

#[derive(Debug, Clone)]
pub(crate) struct Resource {
    pub(crate) number: u64,
    pub(crate) locks: ListHead,
    pub(crate) waiters: ListHead,
    windex: Option<Box<WaiterIndex>>,
    nodes: NodeCounts,
    /// Position in creation order (C's resource list), for purge's visiting order.
    created: u64,
    prev: u32,
    next: u32,
}

impl Resource {
    fn is_empty(&self) -> bool {
        self.locks.is_empty() && self.waiters.is_empty()
    }
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
    /// Resource slot by inode number. Only looked up, never iterated in order (creation
    /// order is the linked list), so a hash map with a fixed-key SipHash: one probe instead
    /// of a B-tree descent at 10⁶ resources, and deterministic (no random seed).
    by_number: HashMap<u64, u32, BuildHasherDefault<DefaultHasher>>,
    head: u32,
    tail: u32,
    /// (nodeid, creation position, slot) for every resource where the node has a lock or a
    /// waiter: a purge walks its node's resources in creation order (C's) without lookups.
    by_node: BTreeSet<(i32, u64, u32)>,
    dirty: BTreeSet<u64>,
    next_created: u64,
    scratch: Vec<Slot>,
}

impl Lockspace {
    /// An empty table for the lockspace whose global id is `fsid`, on node `our_nodeid`.
    pub fn new(our_nodeid: u32, fsid: u32) -> Self {
        Self {
            our_nodeid: i32::try_from(our_nodeid).unwrap_or(i32::MAX),
            fsid,
            locks: Arena::default(),
            waiters: Arena::default(),
            resources: Vec::new(),
            free_resources: Vec::new(),
            by_number: HashMap::default(),
            head: NIL,
            tail: NIL,
            by_node: BTreeSet::new(),
            dirty: BTreeSet::new(),
            next_created: 0,
            scratch: Vec::new(),
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
        self.locks.live()
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

    /// Bytes held by the table's own structures (slabs and maps, estimated for the maps).
    pub fn approx_heap_bytes(&self) -> usize {
        // B-tree entries cost their size plus roughly half again in node slack and edges.
        let map = |entry: usize, n: usize| n * entry * 3 / 2;
        self.locks.heap_bytes()
            + self.waiters.heap_bytes()
            + self.resources.capacity() * size_of::<Option<Resource>>()
            // hash table: (key, value) slots plus a control byte each, at least 1/8 empty
            + self.by_number.capacity() * (size_of::<(u64, u32)>() + 1)
            + map(size_of::<(i32, u64, u32)>(), self.by_node.len())
    }

    pub(crate) fn res(&self, r: u32) -> &Resource {
        self.resources[r as usize]
            .as_ref()
            .expect("resource slot in by_number is live")
    }

    fn res_mut(&mut self, r: u32) -> &mut Resource {
        self.resources[r as usize]
            .as_mut()
            .expect("resource slot in by_number is live")
    }

    pub(crate) fn find(&self, number: u64) -> Option<u32> {
        self.by_number.get(&number).copied()
    }

    /// Resource slots in creation order.
    pub(crate) fn resources_in_order(&self) -> impl Iterator<Item = u32> + '_ {
        let mut r = self.head;
        std::iter::from_fn(move || {
            if r == NIL {
                return None;
            }
            let cur = r;
            r = self.res(cur).next;
            Some(cur)
        })
    }

    /// `find_resource(create=1)`: appended at the tail of the creation list.
    pub(crate) fn find_or_create(&mut self, number: u64) -> u32 {
        if let Some(r) = self.find(number) {
            return r;
        }
        let res = Resource {
            number,
            locks: ListHead::default(),
            waiters: ListHead::default(),
            windex: None,
            nodes: NodeCounts::Empty,
            created: self.next_created,
            prev: self.tail,
            next: NIL,
        };
        self.next_created += 1;
        let r = if let Some(r) = self.free_resources.pop() {
            self.resources[r as usize] = Some(res);
            r
        } else {
            let r = u32::try_from(self.resources.len()).expect("fewer than 2^32 resources");
            self.resources.push(Some(res));
            r
        };
        if self.tail == NIL {
            self.head = r;
        } else {
            let t = self.tail;
            self.res_mut(t).next = r;
        }
        self.tail = r;
        self.by_number.insert(number, r);
        r
    }

    pub(crate) fn put_resource_if_empty(&mut self, r: u32) {
        self.put_resource(r);
    }

    /// `put_resource`: frees the resource when it holds neither locks nor waiters.
    fn put_resource(&mut self, r: u32) {
        if !self.res(r).is_empty() {
            return;
        }
        let res = self.resources[r as usize]
            .take()
            .expect("resource slot in by_number is live");
        if res.prev == NIL {
            self.head = res.next;
        } else {
            self.res_mut(res.prev).next = res.next;
        }
        if res.next == NIL {
            self.tail = res.prev;
        } else {
            self.res_mut(res.next).prev = res.prev;
        }
        self.by_number.remove(&res.number);
        self.dirty.remove(&res.number);
        self.free_resources.push(r);
    }

    fn count_entry(&mut self, r: u32, nodeid: i32, add: bool) {
        let res = self.res_mut(r);
        let created = res.created;
        if add {
            if res.nodes.inc(nodeid) {
                self.by_node.insert((nodeid, created, r));
            }
        } else if res.nodes.dec(nodeid) {
            self.by_node.remove(&(nodeid, created, r));
        }
    }

    // ---- granted locks -------------------------------------------------------------

    fn add_lock(&mut self, r: u32, req: &Req, ex: bool, start: u64, end: u64, since: u64) {
        let lock = Lock {
            owner: req.owner,
            nodeid: req.nodeid,
            pid: req.pid,
            ex,
            since,
        };
        let res = self.resources[r as usize]
            .as_mut()
            .expect("resource slot is live");
        self.locks.push_back(&mut res.locks, start, end, lock);
        self.count_entry(r, req.nodeid, true);
    }

    fn del_lock(&mut self, r: u32, s: Slot) {
        let res = self.resources[r as usize]
            .as_mut()
            .expect("resource slot is live");
        let lock = self.locks.remove(&mut res.locks, s);
        self.count_entry(r, lock.nodeid, false);
    }

    fn set_lock_range(&mut self, r: u32, s: Slot, start: u64, end: u64) {
        let res = self.resources[r as usize]
            .as_mut()
            .expect("resource slot is live");
        self.locks.set_range(&mut res.locks, s, start, end);
    }

    /// The request's same-owner fragments overlapping it, in list order.
    fn own_overlapping(&mut self, r: u32, req: &Req) -> Vec<Slot> {
        let mut found = std::mem::take(&mut self.scratch);
        found.clear();
        let res = self.res(r);
        self.locks
            .overlapping(&res.locks, req.start, req.end, &mut found);
        found.retain(|&s| {
            let l = self.locks.get(s);
            l.nodeid == req.nodeid && l.owner == req.owner
        });
        found.sort_unstable_by_key(|&s| self.locks.seq(s));
        found
    }

    /// `is_conflict`: the first conflicting fragment in list order, if any.
    fn first_conflict(&mut self, r: u32, req: &Req) -> Option<Slot> {
        let mut found = std::mem::take(&mut self.scratch);
        found.clear();
        let res = self.res(r);
        self.locks
            .overlapping(&res.locks, req.start, req.end, &mut found);
        let best = found
            .iter()
            .copied()
            .filter(|&s| {
                let l = self.locks.get(s);
                !(l.nodeid == req.nodeid && l.owner == req.owner) && (req.ex || l.ex)
            })
            .min_by_key(|&s| self.locks.seq(s));
        self.scratch = found;
        best
    }

    /// `lock_internal`: grants `req` over its owner's existing fragments (no coalescing).
    /// Returns the range where the granted set became weaker (a downgrade), if any.
    fn lock_internal(&mut self, r: u32, req: &Req, now: u64) -> Option<(u64, u64)> {
        let own = self.own_overlapping(r, req);
        let mut released = None;
        for &s in &own {
            let (es, ee) = self.locks.range(s);
            let e = *self.locks.get(s);
            let downgrade = e.ex && !req.ex;
            if downgrade {
                released = Some((req.start, req.end));
            }
            match overlap_type(req.start, req.end, es, ee) {
                Overlap::Same => {
                    // same mode: nothing; else convert in place (pid unchanged, as C)
                    self.locks.get_mut(s).ex = req.ex;
                    self.scratch = own;
                    return released;
                }
                Overlap::InsideEdge => {
                    if e.ex != req.ex {
                        // lock_case1: E becomes N, the rest of E keeps the old mode
                        let (s2, e2) = shrink(es, ee, req.start, req.end);
                        self.set_lock_range(r, s, req.start, req.end);
                        self.locks.get_mut(s).ex = req.ex;
                        self.add_lock(r, req, !req.ex, s2, e2, e.since);
                    }
                    self.scratch = own;
                    return released;
                }
                Overlap::Inside => {
                    if e.ex != req.ex {
                        // lock_case2: front and back fragments keep the old mode
                        self.add_lock(r, req, !req.ex, es, req.start - 1, e.since);
                        self.add_lock(r, req, !req.ex, req.end + 1, ee, e.since);
                        self.set_lock_range(r, s, req.start, req.end);
                        self.locks.get_mut(s).ex = req.ex;
                    }
                    self.scratch = own;
                    return released;
                }
                Overlap::Covers => self.del_lock(r, s),
                Overlap::Partial => {
                    let (a, b) = shrink(es, ee, req.start, req.end);
                    self.set_lock_range(r, s, a, b);
                }
            }
        }
        self.scratch = own;
        self.add_lock(r, req, req.ex, req.start, req.end, now);
        released
    }

    /// `unlock_internal`: removes `req`'s range from its owner's fragments. Returns the
    /// range released, if anything was.
    fn unlock_internal(&mut self, r: u32, req: &Req) -> Option<(u64, u64)> {
        let own = self.own_overlapping(r, req);
        let released = (!own.is_empty()).then_some((req.start, req.end));
        for &s in &own {
            let (es, ee) = self.locks.range(s);
            match overlap_type(req.start, req.end, es, ee) {
                Overlap::Same => {
                    self.del_lock(r, s);
                    break;
                }
                Overlap::InsideEdge => {
                    let (a, b) = shrink(es, ee, req.start, req.end);
                    self.set_lock_range(r, s, a, b);
                    break;
                }
                Overlap::Inside => {
                    // back fragment: E's mode, the unlocker's pid
                    let e = *self.locks.get(s);
                    self.add_lock(r, req, e.ex, req.end + 1, ee, e.since);
                    self.set_lock_range(r, s, es, req.start - 1);
                    break;
                }
                Overlap::Covers => self.del_lock(r, s),
                Overlap::Partial => {
                    let (a, b) = shrink(es, ee, req.start, req.end);
                    self.set_lock_range(r, s, a, b);
                }
            }
        }
        self.scratch = own;
        released
    }

    // ---- waiters -------------------------------------------------------------------

    fn windex(&mut self, r: u32) -> &mut WaiterIndex {
        self.res_mut(r).windex.get_or_insert_with(Box::default)
    }

    /// `add_waiter`: appended to the FIFO. It conflicts now, so it is not a candidate.
    fn add_waiter(&mut self, r: u32, info: PlockInfo, now: u64, candidate: bool) {
        let res = self.resources[r as usize]
            .as_mut()
            .expect("resource slot is live");
        let s = self.waiters.push_back(
            &mut res.waiters,
            info.start,
            info.end,
            Waiter { info, since: now },
        );
        let seq = self.waiters.seq(s);
        let number = res.number;
        let wi = self.windex(r);
        wi.by_owner.insert((info.nodeid, info.owner, seq, s));
        if candidate {
            wi.candidates.insert(seq, s);
            self.dirty.insert(number);
        }
        self.count_entry(r, info.nodeid, true);
    }

    fn del_waiter(&mut self, r: u32, s: Slot) -> Waiter {
        let seq = self.waiters.seq(s);
        let res = self.resources[r as usize]
            .as_mut()
            .expect("resource slot is live");
        let w = self.waiters.remove(&mut res.waiters, s);
        let number = res.number;
        let empty = res.waiters.is_empty();
        if let Some(wi) = res.windex.as_mut() {
            wi.candidates.remove(&seq);
            wi.by_owner.remove(&(w.info.nodeid, w.info.owner, seq, s));
            if wi.candidates.is_empty() {
                self.dirty.remove(&number);
            }
        }
        if empty {
            self.res_mut(r).windex = None;
        }
        self.count_entry(r, w.info.nodeid, false);
        w
    }

    /// Marks every waiter overlapping `[start, end]` as a candidate for the next pass.
    fn release(&mut self, r: u32, (start, end): (u64, u64)) {
        if self.res(r).waiters.is_empty() {
            return;
        }
        let mut found = Vec::new();
        self.waiters
            .overlapping(&self.res(r).waiters, start, end, &mut found);
        if found.is_empty() {
            return;
        }
        let seqs: Vec<(u64, Slot)> = found.iter().map(|&s| (self.waiters.seq(s), s)).collect();
        let number = self.res(r).number;
        let wi = self.windex(r);
        wi.candidates.extend(seqs);
        self.dirty.insert(number);
    }

    /// `do_waiters`: one FIFO pass granting every candidate that no longer conflicts.
    fn do_waiters(&mut self, r: u32, now: u64, out: &mut Vec<Reply>) {
        let mut cursor: Option<u64> = None;
        loop {
            let next = {
                let Some(wi) = self.res(r).windex.as_ref() else {
                    return;
                };
                let from = cursor.map_or(0, |c| c + 1);
                wi.candidates.range(from..).next().map(|(&q, &s)| (q, s))
            };
            let Some((seq, s)) = next else { break };
            cursor = Some(seq);
            let info = self.waiters.get(s).info;
            let req = Req::from(&info);
            if self.first_conflict(r, &req).is_some() {
                if let Some(wi) = self.res_mut(r).windex.as_mut() {
                    wi.candidates.remove(&seq);
                }
                continue;
            }
            self.del_waiter(r, s);
            let released = self.lock_internal(r, &req, now);
            if let Some(range) = released {
                self.release(r, range);
            }
            if info.nodeid == self.our_nodeid {
                out.push(Reply {
                    info: PlockInfo { rv: 0, ..info },
                });
            }
        }
        let number = self.res(r).number;
        if self
            .res(r)
            .windex
            .as_ref()
            .is_none_or(|wi| wi.candidates.is_empty())
        {
            self.dirty.remove(&number);
        }
    }

    /// `clear_waiters`: drops every waiter of the owner on the resource, without replies.
    fn clear_waiters(&mut self, r: u32, nodeid: i32, owner: u64) {
        let slots: Vec<Slot> = match self.res(r).windex.as_ref() {
            Some(wi) => wi
                .by_owner
                .range((nodeid, owner, 0, 0)..=(nodeid, owner, u64::MAX, Slot::MAX))
                .map(|e| e.3)
                .collect(),
            None => return,
        };
        for s in slots {
            self.del_waiter(r, s);
        }
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
        let r = self.find_or_create(info.number);
        let req = Req::from(info);
        let ours = info.nodeid == self.our_nodeid;
        if self.first_conflict(r, &req).is_some() {
            if info.wait {
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
        self.put_resource(r);
    }

    /// `do_unlock`.
    fn do_unlock(&mut self, now: u64, info: &PlockInfo, out: &mut Vec<Reply>) {
        let ours = info.nodeid == self.our_nodeid;
        let Some(r) = self.find(info.number) else {
            // C creates the resource, finds nothing to unlock, replies 0 and frees it
            if ours && !info.flags.close() {
                out.push(Reply {
                    info: PlockInfo { rv: 0, ..*info },
                });
            }
            return;
        };
        let req = Req::from(info);
        if let Some(range) = self.unlock_internal(r, &req) {
            self.release(r, range);
        }
        if info.flags.close() {
            self.clear_waiters(r, info.nodeid, info.owner);
        } else if ours {
            out.push(Reply {
                info: PlockInfo { rv: 0, ..*info },
            });
        }
        self.do_waiters(r, now, out);
        self.put_resource(r);
    }

    /// `do_get`: reports the first conflicting fragment in list order.
    fn do_get(&mut self, info: &PlockInfo) -> Reply {
        let mut rep = *info;
        rep.rv = 0;
        if let Some(r) = self.find(info.number) {
            if let Some(s) = self.first_conflict(r, &Req::from(info)) {
                let (start, end) = self.locks.range(s);
                let l = self.locks.get(s);
                rep.ex = l.ex;
                rep.pid = l.pid;
                rep.start = start;
                rep.end = end;
                rep.rv = 1;
            }
        }
        Reply { info: rep }
    }

    /// CANCEL (upstream, after 4.2): removes the first waiter equal on nodeid, fsid,
    /// number, owner, pid, start, end and ex. No waiter pass.
    fn do_cancel(&mut self, info: &PlockInfo) -> i32 {
        let Some(r) = self.find(info.number) else {
            return -ENOENT;
        };
        let mut found = Vec::new();
        self.waiters
            .overlapping(&self.res(r).waiters, info.start, info.end, &mut found);
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
        self.put_resource(r);
        rv
    }

    /// `purge_plocks` for a node that left or failed: removes its locks and waiters, then
    /// runs the waiter pass on every resource that may have grantable waiters. Replies for
    /// this node's granted waiters are pushed onto `out`.
    pub fn purge_node(&mut self, now: u64, nodeid: u32, out: &mut Vec<Reply>) -> usize {
        let nodeid = i32::try_from(nodeid).unwrap_or(i32::MAX);
        // C visits its resource list in creation order; grants (replies) follow that order.
        // The per-node index is kept in creation order with the slots, so no lookups.
        let mut slots: BTreeSet<(u64, u32)> = self
            .by_node
            .range((nodeid, 0, 0)..=(nodeid, u64::MAX, u32::MAX))
            .map(|&(_, created, r)| (created, r))
            .collect();
        for n in &self.dirty {
            if let Some(r) = self.find(*n) {
                slots.insert((self.res(r).created, r));
            }
        }
        let mut purged = 0;
        for (_, r) in slots {
            let locks: Vec<Slot> = self
                .locks
                .iter(&self.res(r).locks)
                .filter(|&s| self.locks.get(s).nodeid == nodeid)
                .collect();
            for s in locks {
                let range = self.locks.range(s);
                self.del_lock(r, s);
                self.release(r, range);
                purged += 1;
            }
            let waiters: Vec<Slot> = match self.res(r).windex.as_ref() {
                Some(wi) => wi
                    .by_owner
                    .range((nodeid, 0, 0, 0)..=(nodeid, u64::MAX, u64::MAX, Slot::MAX))
                    .map(|e| e.3)
                    .collect(),
                None => Vec::new(),
            };
            for s in waiters {
                self.del_waiter(r, s);
                purged += 1;
            }
            if !self.res(r).waiters.is_empty() {
                self.do_waiters(r, now, out);
            }
            self.put_resource(r);
        }
        purged
    }

    /// Adds a restored granted lock or waiter at the tail of resource `r`
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
            self.add_lock(r, &req, entry.ex, entry.start, entry.end, now);
        }
    }
}
