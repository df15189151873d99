//! The slot table of a [`Lockspace`]: finding resources by number, their creation order,
//! the two forms of a resource (one inline lock, or `Full`) and the changes between them,
//! the per-node lists and index that purges use.

use super::*;
// The slot table's hash: keyed by the table's seed, so a user who picks which inodes to lock
// cannot pick colliding ones. The table is only probed, never iterated, so its layout (which
// differs between seeds) cannot make replicas differ.
use crate::keyed::hash_number;

/// The `Full` of a slot, with the slot table borrowed alone (so the arenas stay free).
pub(super) fn full_of(resources: &mut [Option<Resource>], r: u32) -> &mut Full {
    match resources[r as usize].as_mut().map(|res| &mut res.body) {
        Some(Body::Full(f)) => f,
        _ => unreachable!("resource {r} is live and promoted"),
    }
}

impl Lockspace {
    pub(crate) fn res(&self, r: u32) -> &Resource {
        self.resources[r as usize]
            .as_ref()
            .expect("resource slot in by_number is live")
    }

    pub(super) fn res_mut(&mut self, r: u32) -> &mut Resource {
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

    pub(super) fn full_mut(&mut self, r: u32) -> &mut Full {
        full_of(&mut self.resources, r)
    }

    pub(crate) fn find(&self, number: u64) -> Option<u32> {
        let resources = &self.resources;
        self.by_number
            .find(hash_number(self.hash_key, number), |&r| {
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

    /// Relinks the resources in number order: from now on dumps, state transfers and any
    /// resource created later (at the tail) follow it. O(n log n); for a membership change.
    pub fn order_by_number(&mut self) {
        let mut slots: Vec<u32> = self.resources_in_order().collect();
        slots.sort_unstable_by_key(|&r| self.res(r).number);
        let mut prev = NIL;
        for &r in &slots {
            let res = self.res_mut(r);
            res.prev = prev;
            res.next = NIL;
            if prev == NIL {
                self.head = r;
            } else {
                self.res_mut(prev).next = r;
            }
            prev = r;
        }
        self.tail = prev;
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
    pub(super) fn renumber_resources(&mut self) {
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
    pub(super) fn create(&mut self, number: u64, body: Body) -> u32 {
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
        let (resources, key) = (&self.resources, self.hash_key);
        self.by_number
            .insert_unique(hash_number(key, number), r, |&x| {
                resources[x as usize]
                    .as_ref()
                    .map_or(0, |res| hash_number(key, res.number))
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
    pub(super) fn link_node(&mut self, r: u32) {
        let Body::One(o) = self.res(r).body else {
            return;
        };
        let node = o.lock.nodeid;
        self.count_held(node, true);
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
    pub(super) fn unlink_node(&mut self, r: u32) {
        let (node, prev, next) = match &self.res(r).body {
            Body::One(o) => (o.lock.nodeid, self.res(r).node_prev, self.res(r).node_next),
            Body::Full(_) => return,
        };
        self.count_held(node, false);
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
    pub(super) fn promote(&mut self, r: u32) {
        let Body::One(o) = self.res(r).body else {
            return;
        };
        self.unlink_node(r);
        self.ones -= 1;
        self.res_mut(r).body = Body::Full(Box::default());
        let f = full_of(&mut self.resources, r);
        self.locks.push_back(&mut f.locks, o.start, o.end, o.lock);
        self.count_held(o.lock.nodeid, true);
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
            self.count_held(lock.nodeid, false);
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
    pub(super) fn free_resource(&mut self, r: u32) {
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
            .find_entry(hash_number(self.hash_key, res.number), |&x| x == r)
        {
            e.remove();
        }
        self.dirty.remove(&res.number);
        self.free_resources.push(r);
    }

    pub(super) fn count_entry(&mut self, r: u32, nodeid: i32, add: bool) {
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

    /// A granted lock of `nodeid` came (`add`) or went, inline or in the arena: counted
    /// when it is ours ([`Lockspace::our_lock_count`]).
    pub(super) fn count_held(&mut self, nodeid: i32, add: bool) {
        if nodeid != self.our_nodeid {
            return;
        }
        if add {
            self.our_locks += 1;
        } else {
            self.our_locks = self.our_locks.saturating_sub(1);
        }
    }
}
