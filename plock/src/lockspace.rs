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
//! * purging a node visits only the resources it used: a per-node list through the slots of
//!   its one-lock resources, and a `(nodeid, creation position)` index of the others.

use std::collections::{BTreeMap, BTreeSet};

use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};

use crate::arena::{Arena, ListHead, Slot};
use crate::effects::{ApplyError, Reply};
use crate::range::{Overlap, overlap_type, shrink};

const NIL: u32 = u32::MAX;
const EAGAIN: i32 = 11;
const ENOENT: i32 = 2;
const EINVAL: i32 = 22;

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
}

/// Waiter bookkeeping that only exists while a resource has waiters.
#[derive(Debug, Default, Clone)]
pub(crate) struct WaiterIndex {
    /// Waiters to examine at the next pass, by FIFO position.
    candidates: BTreeMap<u32, Slot>,
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

/// The slot table's hash of an inode number: a fixed bijective mixer (splitmix64's
/// finaliser), no seed. The table is only probed, never iterated, so its layout cannot make
/// replicas differ.
fn hash_number(number: u64) -> u64 {
    let mut z = number.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `Full` of a slot, with the slot table borrowed alone (so the arenas stay free).
fn full_of(resources: &mut [Option<Resource>], r: u32) -> &mut Full {
    match resources[r as usize].as_mut().map(|res| &mut res.body) {
        Some(Body::Full(f)) => f,
        _ => unreachable!("resource {r} is live and promoted"),
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
    head: u32,
    tail: u32,
    /// (nodeid, creation position, slot) for every `Full` resource where the node has a lock
    /// or a waiter: a purge walks them in creation order (C's) without lookups.
    by_node: BTreeSet<(i32, u32, u32)>,
    /// Per node, the first of its one-lock resources (a list through their slots).
    node_lists: BTreeMap<i32, u32>,
    /// Resources with one inline lock.
    ones: usize,
    dirty: BTreeSet<u64>,
    next_created: u32,
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
            by_number: hashbrown::HashTable::new(),
            head: NIL,
            tail: NIL,
            by_node: BTreeSet::new(),
            node_lists: BTreeMap::new(),
            ones: 0,
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
        self.locks.live() + self.ones
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

    /// The indexes of a promoted resource.
    pub(crate) fn full(&self, r: u32) -> &Full {
        match &self.res(r).body {
            Body::Full(f) => f,
            Body::One(_) => unreachable!("resource {r} is promoted"),
        }
    }

    fn full_mut(&mut self, r: u32) -> &mut Full {
        full_of(&mut self.resources, r)
    }

    pub(crate) fn find(&self, number: u64) -> Option<u32> {
        let resources = &self.resources;
        self.by_number
            .find(hash_number(number), |&r| {
                resources[r as usize]
                    .as_ref()
                    .is_some_and(|res| res.number == number)
            })
            .copied()
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

    /// The granted locks of `r` in list order: (start, end, lock).
    pub(crate) fn locks_of(&self, r: u32) -> impl Iterator<Item = (u64, u64, Lock)> + '_ {
        let (one, list) = match &self.res(r).body {
            Body::One(o) => (Some((o.start, o.end, o.lock)), None),
            Body::Full(f) => (None, Some(f.locks)),
        };
        one.into_iter().chain(list.into_iter().flat_map(move |l| {
            self.locks.iter(&l).map(move |s| {
                let (start, end) = self.locks.range(s);
                (start, end, *self.locks.get(s))
            })
        }))
    }

    /// The waiters of `r` in FIFO order.
    pub(crate) fn waiters_of(&self, r: u32) -> impl Iterator<Item = &Waiter> + '_ {
        let list = match &self.res(r).body {
            Body::One(_) => None,
            Body::Full(f) => Some(f.waiters),
        };
        list.into_iter()
            .flat_map(move |l| self.waiters.iter(&l).map(move |s| self.waiters.get(s)))
    }

    /// Gives every resource the creation positions 0.. in order (the positions are used up:
    /// once per 2³² resources created) and rebuilds the index that holds them.
    fn renumber_resources(&mut self) {
        let order: Vec<u32> = self.resources_in_order().collect();
        for (i, &r) in order.iter().enumerate() {
            self.res_mut(r).created = u32::try_from(i).unwrap_or(u32::MAX);
        }
        self.next_created = u32::try_from(order.len()).unwrap_or(u32::MAX);
        let old = std::mem::take(&mut self.by_node);
        self.by_node = old
            .into_iter()
            .map(|(n, _, r)| (n, self.res(r).created, r))
            .collect();
    }

    /// Moves the next creation position close to the end, so a test reaches a renumbering.
    #[cfg(test)]
    pub(crate) fn exhaust_creation_positions(&mut self, left: u32) {
        self.next_created = self.next_created.max(u32::MAX - left);
    }

    /// Moves every lock and waiter list close to its last position (tests).
    #[cfg(test)]
    pub(crate) fn exhaust_list_positions(&mut self, left: u32) {
        for res in self.resources.iter_mut().flatten() {
            if let Body::Full(f) = &mut res.body {
                f.locks.exhaust_positions(left);
                f.waiters.exhaust_positions(left);
            }
        }
    }

    /// `find_resource(create=1)` for a resource not in the table: appended at the tail of the
    /// creation list, with `body`.
    fn create(&mut self, number: u64, body: Body) -> u32 {
        if self.next_created == u32::MAX {
            self.renumber_resources();
        }
        let res = Resource {
            number,
            created: self.next_created,
            prev: self.tail,
            next: NIL,
            node_prev: NIL,
            node_next: NIL,
            body,
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
        let resources = &self.resources;
        self.by_number.insert_unique(hash_number(number), r, |&x| {
            resources[x as usize]
                .as_ref()
                .map_or(0, |res| hash_number(res.number))
        });
        if matches!(self.res(r).body, Body::One(_)) {
            self.ones += 1;
            self.link_node(r);
        }
        r
    }

    /// An existing resource, promoted (to add entries to it).
    pub(crate) fn find_promoted(&mut self, number: u64) -> Option<u32> {
        let r = self.find(number)?;
        self.promote(r);
        Some(r)
    }

    /// `find_resource(create=1)`, promoted.
    pub(crate) fn find_or_create(&mut self, number: u64) -> u32 {
        match self.find(number) {
            Some(r) => {
                self.promote(r);
                r
            }
            None => self.create(number, Body::Full(Box::default())),
        }
    }

    /// Links a one-lock resource into its node's list.
    fn link_node(&mut self, r: u32) {
        let Body::One(o) = self.res(r).body else {
            return;
        };
        let node = o.lock.nodeid;
        let head = self.node_lists.get(&node).copied().unwrap_or(NIL);
        {
            let res = self.res_mut(r);
            res.node_prev = NIL;
            res.node_next = head;
        }
        if head != NIL {
            self.res_mut(head).node_prev = r;
        }
        self.node_lists.insert(node, r);
    }

    /// Unlinks a one-lock resource from its node's list.
    fn unlink_node(&mut self, r: u32) {
        let (node, prev, next) = match &self.res(r).body {
            Body::One(o) => (o.lock.nodeid, self.res(r).node_prev, self.res(r).node_next),
            Body::Full(_) => return,
        };
        if prev == NIL {
            if next == NIL {
                self.node_lists.remove(&node);
            } else {
                self.node_lists.insert(node, next);
            }
        } else {
            self.res_mut(prev).node_next = next;
        }
        if next != NIL {
            self.res_mut(next).node_prev = prev;
        }
        let res = self.res_mut(r);
        res.node_prev = NIL;
        res.node_next = NIL;
    }

    /// A one-lock resource takes the general form: its lock moves into the arena.
    fn promote(&mut self, r: u32) {
        let Body::One(o) = self.res(r).body else {
            return;
        };
        self.unlink_node(r);
        self.ones -= 1;
        self.res_mut(r).body = Body::Full(Box::default());
        let f = full_of(&mut self.resources, r);
        self.locks.push_back(&mut f.locks, o.start, o.end, o.lock);
        self.count_entry(r, o.lock.nodeid, true);
    }

    /// `put_resource`, after an operation: frees the resource when it holds neither locks
    /// nor waiters; a resource left with one lock and no waiter takes the inline form.
    pub(crate) fn settle(&mut self, r: u32) {
        let (empty, single) = match &self.res(r).body {
            Body::One(_) => return,
            Body::Full(f) => (
                f.is_empty(),
                f.locks.len() == 1 && f.waiters.is_empty() && f.windex.is_none(),
            ),
        };
        if empty {
            self.free_resource(r);
        } else if single {
            let f = full_of(&mut self.resources, r);
            let s = f.locks.head();
            let (start, end) = self.locks.range(s);
            let lock = self.locks.remove(&mut f.locks, s);
            self.count_entry(r, lock.nodeid, false);
            let res = self.res_mut(r);
            res.body = Body::One(OneLock { start, end, lock });
            let number = res.number;
            self.dirty.remove(&number);
            self.ones += 1;
            self.link_node(r);
        }
    }

    /// Removes resource `r` from the table (it is empty, or a one-lock resource whose lock
    /// goes).
    fn free_resource(&mut self, r: u32) {
        if matches!(self.res(r).body, Body::One(_)) {
            self.unlink_node(r);
            self.ones -= 1;
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
        if let Ok(e) = self
            .by_number
            .find_entry(hash_number(res.number), |&x| x == r)
        {
            e.remove();
        }
        self.dirty.remove(&res.number);
        self.free_resources.push(r);
    }

    fn count_entry(&mut self, r: u32, nodeid: i32, add: bool) {
        let res = self.resources[r as usize]
            .as_mut()
            .expect("resource slot is live");
        let created = res.created;
        let Body::Full(f) = &mut res.body else {
            return;
        };
        if add {
            if f.nodes.inc(nodeid) {
                self.by_node.insert((nodeid, created, r));
            }
        } else if f.nodes.dec(nodeid) {
            self.by_node.remove(&(nodeid, created, r));
        }
    }

    // ---- granted locks (of a promoted resource) -----------------------------------

    fn add_lock(&mut self, r: u32, req: &Req, ex: bool, start: u64, end: u64, since: u32) {
        let lock = Lock {
            owner: req.owner,
            nodeid: req.nodeid,
            pid: req.pid,
            since,
            ex,
        };
        let f = full_of(&mut self.resources, r);
        self.locks.push_back(&mut f.locks, start, end, lock);
        self.count_entry(r, req.nodeid, true);
    }

    fn del_lock(&mut self, r: u32, s: Slot) {
        let f = full_of(&mut self.resources, r);
        let lock = self.locks.remove(&mut f.locks, s);
        self.count_entry(r, lock.nodeid, false);
    }

    fn set_lock_range(&mut self, r: u32, s: Slot, start: u64, end: u64) {
        let f = full_of(&mut self.resources, r);
        self.locks.set_range(&mut f.locks, s, start, end);
    }

    /// The request's same-owner fragments overlapping it, in list order.
    fn own_overlapping(&mut self, r: u32, req: &Req) -> Vec<Slot> {
        let mut found = std::mem::take(&mut self.scratch);
        found.clear();
        let list = self.full(r).locks;
        self.locks
            .overlapping(&list, req.start, req.end, &mut found);
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
        let list = self.full(r).locks;
        self.locks
            .overlapping(&list, req.start, req.end, &mut found);
        let best = found
            .iter()
            .copied()
            .filter(|&s| conflicts(req, self.locks.get(s)))
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
        self.add_lock(r, req, req.ex, req.start, req.end, secs(now));
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

    // ---- waiters (of a promoted resource) -------------------------------------------

    fn windex(&mut self, r: u32) -> &mut WaiterIndex {
        self.full_mut(r).windex.get_or_insert_with(Box::default)
    }

    /// Rebuilds the waiter index of `r` after its FIFO positions were renumbered, keeping
    /// which waiters are candidates.
    fn reindex_waiters(&mut self, r: u32) {
        let list = self.full(r).waiters;
        let was: BTreeSet<Slot> = self
            .full(r)
            .windex
            .as_ref()
            .map(|wi| wi.candidates.values().copied().collect())
            .unwrap_or_default();
        let mut wi = WaiterIndex::default();
        for s in self.waiters.iter(&list) {
            let seq = self.waiters.seq(s);
            let info = &self.waiters.get(s).info;
            wi.by_owner.insert((info.nodeid, info.owner, seq, s));
            if was.contains(&s) {
                wi.candidates.insert(seq, s);
            }
        }
        self.full_mut(r).windex = Some(Box::new(wi));
    }

    /// `add_waiter`: appended to the FIFO. It conflicts now, so it is not a candidate.
    fn add_waiter(&mut self, r: u32, info: PlockInfo, now: u64, candidate: bool) {
        let number = self.res(r).number;
        let f = full_of(&mut self.resources, r);
        let renumbered = f.waiters.will_renumber();
        let s = self.waiters.push_back(
            &mut f.waiters,
            info.start,
            info.end,
            Waiter { info, since: now },
        );
        if renumbered {
            self.reindex_waiters(r);
        }
        let seq = self.waiters.seq(s);
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
        let number = self.res(r).number;
        let f = full_of(&mut self.resources, r);
        let w = self.waiters.remove(&mut f.waiters, s);
        let empty = f.waiters.is_empty();
        if let Some(wi) = f.windex.as_mut() {
            wi.candidates.remove(&seq);
            wi.by_owner.remove(&(w.info.nodeid, w.info.owner, seq, s));
            if wi.candidates.is_empty() {
                self.dirty.remove(&number);
            }
        }
        if empty {
            f.windex = None;
        }
        self.count_entry(r, w.info.nodeid, false);
        w
    }

    /// Marks every waiter overlapping `[start, end]` as a candidate for the next pass.
    fn release(&mut self, r: u32, (start, end): (u64, u64)) {
        let list = self.full(r).waiters;
        if list.is_empty() {
            return;
        }
        let mut found = Vec::new();
        self.waiters.overlapping(&list, start, end, &mut found);
        if found.is_empty() {
            return;
        }
        let seqs: Vec<(u32, Slot)> = found.iter().map(|&s| (self.waiters.seq(s), s)).collect();
        let number = self.res(r).number;
        let wi = self.windex(r);
        wi.candidates.extend(seqs);
        self.dirty.insert(number);
    }

    /// `do_waiters`: one FIFO pass granting every candidate that no longer conflicts.
    fn do_waiters(&mut self, r: u32, now: u64, out: &mut Vec<Reply>) {
        let mut cursor: Option<u32> = None;
        loop {
            let next = {
                let Some(wi) = self.full(r).windex.as_ref() else {
                    return;
                };
                // positions stop below u32::MAX, so c + 1 does not wrap
                let from = cursor.map_or(0, |c| c + 1);
                wi.candidates.range(from..).next().map(|(&q, &s)| (q, s))
            };
            let Some((seq, s)) = next else { break };
            cursor = Some(seq);
            let info = self.waiters.get(s).info;
            let req = Req::from(&info);
            if self.first_conflict(r, &req).is_some() {
                if let Some(wi) = self.full_mut(r).windex.as_mut() {
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
            .full(r)
            .windex
            .as_ref()
            .is_none_or(|wi| wi.candidates.is_empty())
        {
            self.dirty.remove(&number);
        }
    }

    /// `clear_waiters`: drops every waiter of the owner on the resource, without replies.
    fn clear_waiters(&mut self, r: u32, nodeid: i32, owner: u64) {
        let slots: Vec<Slot> = match self.full(r).windex.as_ref() {
            Some(wi) => wi
                .by_owner
                .range((nodeid, owner, 0, 0)..=(nodeid, owner, u32::MAX, Slot::MAX))
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
            if !self.full(r).waiters.is_empty() {
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

#[cfg(test)]
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
mod tests {
    use super::*;

    /// Running out of 32-bit positions (creation order of resources, insertion order of a
    /// resource's locks and waiters) renumbers them and changes no decision: a table pushed
    /// to the last positions every few steps answers, dumps and digests exactly like one
    /// that is not, through random locks, unlocks, waiters, GETs, CANCELs, CLOSEs and
    /// purges from three nodes.
    #[test]
    fn renumbering_positions_changes_nothing() {
        let mut x: u64 = 0x9E37_79B9;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut plain = Lockspace::new(1, 7);
        let mut pushed = Lockspace::new(1, 7);
        let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
        for step in 0..10_000u64 {
            if step % 37 == 0 {
                pushed.exhaust_creation_positions(2);
                pushed.exhaust_list_positions(2);
            }
            let node = 1 + rnd(3) as u32;
            if rnd(200) == 0 {
                plain.purge_node(step, node, &mut out_a);
                pushed.purge_node(step, node, &mut out_b);
            } else {
                let op = [
                    PlockOp::LOCK,
                    PlockOp::LOCK,
                    PlockOp::UNLOCK,
                    PlockOp::GET,
                    PlockOp::CANCEL,
                ][rnd(5) as usize];
                let start = rnd(12);
                let info = PlockInfo {
                    version: PLOCK_VERSION,
                    op,
                    ex: rnd(2) == 0,
                    wait: rnd(2) == 0,
                    flags: PlockFlags(u8::from(op == PlockOp::UNLOCK && rnd(8) == 0)),
                    pid: 100 + rnd(3) as u32,
                    nodeid: node as i32,
                    rv: 0,
                    fsid: 7,
                    number: rnd(4),
                    start,
                    end: start + rnd(6),
                    owner: rnd(3),
                };
                plain.apply(step, node, &info, &mut out_a).expect("apply");
                pushed.apply(step, node, &info, &mut out_b).expect("apply");
            }
            assert_eq!(out_a, out_b, "step {step}");
            assert_eq!(plain.dump_text(), pushed.dump_text(), "step {step}");
            assert_eq!(plain.digest(), pushed.digest(), "step {step}");
        }
        assert!(plain.waiter_count() > 0 || !out_a.is_empty());
    }

    /// A continuation (RD_CONTINUE) for a resource whose first message carried one lock
    /// (C's own streams fill the first message, a fuzzer's need not): the lock already held
    /// inline and the new entries end up in one list, in message order. Found by the
    /// `lscore` fuzz target.
    #[test]
    fn continuation_after_a_one_lock_message() {
        use dlm_proto::wire::{PlockData, RD_CONTINUE, ResourceData};
        let entry = |start: u64, nodeid: u32, waiter: bool| PlockData {
            start,
            end: start + 1,
            owner: u64::from(nodeid),
            pid: 9,
            nodeid,
            ex: true,
            waiter,
        };
        let mut ls = Lockspace::new(4, 7);
        let rd = |flags| ResourceData {
            number: 5,
            owner: 0,
            flags,
        };
        ls.restore(0, rd(0), [entry(0, 1, false)]).expect("first");
        ls.restore(0, rd(RD_CONTINUE), [entry(10, 2, false), entry(0, 3, true)])
            .expect("continuation");
        assert_eq!(
            ls.dump_text(),
            "5 WR 0-1 nodeid 1 pid 9 owner 1 rown 0\n\
             5 WR 10-11 nodeid 2 pid 9 owner 2 rown 0\n\
             5 WR 0-1 nodeid 3 pid 9 owner 3 rown 0 WAITING\n"
        );
        assert_eq!((ls.lock_count(), ls.waiter_count()), (2, 1));
    }

    /// The forms stay as small as the memory target needs.
    #[test]
    fn slot_sizes() {
        assert_eq!(size_of::<Option<Resource>>(), 72);
        assert_eq!(size_of::<Lock>(), 24);
    }
}
