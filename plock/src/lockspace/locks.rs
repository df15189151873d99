//! Granted locks and waiters of a promoted (`Full`) resource: C's `lock_internal`,
//! `unlock_internal`, `add_waiter`, the candidate-based `do_waiters` pass, `clear_waiters`.

use super::deadlock::wait_key;
use super::table::full_of;
use super::*;

impl Lockspace {
    // ---- granted locks (of a promoted resource) -----------------------------------

    pub(super) fn add_lock(
        &mut self,
        r: u32,
        req: &Req,
        ex: bool,
        start: u64,
        end: u64,
        since: u32,
    ) {
        let lock = Lock {
            owner: req.owner,
            nodeid: req.nodeid,
            pid: req.pid,
            since,
            ex,
        };
        let f = full_of(&mut self.resources, r);
        self.locks.push_back(&mut f.locks, start, end, lock);
        self.count_held(req.nodeid, true);
        self.count_entry(r, req.nodeid, true);
    }

    pub(super) fn del_lock(&mut self, r: u32, s: Slot) {
        let f = full_of(&mut self.resources, r);
        let lock = self.locks.remove(&mut f.locks, s);
        self.count_held(lock.nodeid, false);
        self.count_entry(r, lock.nodeid, false);
    }

    pub(super) fn set_lock_range(&mut self, r: u32, s: Slot, start: u64, end: u64) {
        let f = full_of(&mut self.resources, r);
        self.locks.set_range(&mut f.locks, s, start, end);
    }

    /// The request's same-owner fragments overlapping it, in list order.
    pub(super) fn own_overlapping(&mut self, r: u32, req: &Req) -> Vec<Slot> {
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

    /// `f` of the table and the fragments overlapping `req` (found in the lock scratch).
    fn with_overlapping<T>(&mut self, r: u32, req: &Req, f: impl FnOnce(&Self, &[Slot]) -> T) -> T {
        let mut found = std::mem::take(&mut self.scratch);
        found.clear();
        let list = self.full(r).locks;
        self.locks
            .overlapping(&list, req.start, req.end, &mut found);
        let t = f(self, &found);
        self.scratch = found;
        t
    }

    /// `is_conflict`: the first conflicting fragment in list order, if any.
    pub(super) fn first_conflict(&mut self, r: u32, req: &Req) -> Option<Slot> {
        self.with_overlapping(r, req, |ls, found| {
            found
                .iter()
                .copied()
                .filter(|&s| conflicts(req, ls.locks.get(s)))
                .min_by_key(|&s| ls.locks.seq(s))
        })
    }

    /// Whether any fragment conflicts with `req` (`is_conflict` where which one does not
    /// matter: a waiter's pass).
    pub(super) fn has_conflict(&mut self, r: u32, req: &Req) -> bool {
        self.with_overlapping(r, req, |ls, found| {
            found.iter().any(|&s| conflicts(req, ls.locks.get(s)))
        })
    }

    /// `lock_internal`: grants `req` over its owner's existing fragments (no coalescing).
    /// Returns the range where the granted set became weaker (a downgrade), if any.
    pub(super) fn lock_internal(&mut self, r: u32, req: &Req, now: u64) -> Option<(u64, u64)> {
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
    pub(super) fn unlock_internal(&mut self, r: u32, req: &Req) -> Option<(u64, u64)> {
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

    /// Rebuilds the waiter index of `r` after its FIFO positions were renumbered, keeping
    /// which waiters are candidates (their flags).
    pub(super) fn reindex_waiters(&mut self, r: u32) {
        let list = self.full(r).waiters;
        let old = self.full_mut(r).windex.take().unwrap_or_default();
        let mut wi = WaiterIndex {
            marked: old.marked,
            listed: old.listed,
            ..WaiterIndex::default()
        };
        for s in self.waiters.iter(&list) {
            let seq = self.waiters.seq(s);
            let w = self.waiters.get(s);
            wi.by_owner.insert((w.info.nodeid, w.info.owner, seq, s));
            if w.candidate {
                wi.candidates.push(Reverse((seq, s)));
            }
        }
        self.full_mut(r).windex = Some(Box::new(wi));
    }

    /// `add_waiter`: appended to the FIFO. A blocked request conflicts now, so it is not a
    /// candidate; a restored waiter may be.
    pub(super) fn add_waiter(&mut self, r: u32, info: PlockInfo, now: u64, candidate: bool) {
        let number = self.res(r).number;
        let f = full_of(&mut self.resources, r);
        let renumbered = f.waiters.will_renumber();
        let s = self.waiters.push_back(
            &mut f.waiters,
            info.start,
            info.end,
            Waiter {
                info,
                since: now,
                candidate: false,
            },
        );
        if renumbered {
            self.reindex_waiters(r);
        }
        let seq = self.waiters.seq(s);
        self.waiting.insert(wait_key(number, r, s, &info));
        let f = full_of(&mut self.resources, r);
        let wi = f.windex.get_or_insert_with(Box::default);
        wi.by_owner.insert((info.nodeid, info.owner, seq, s));
        if candidate {
            mark(&mut self.waiters, wi, s);
            sync_dirty(&mut self.dirty, wi, number);
        }
        self.count_entry(r, info.nodeid, true);
    }

    pub(super) fn del_waiter(&mut self, r: u32, s: Slot) -> Waiter {
        let seq = self.waiters.seq(s);
        let number = self.res(r).number;
        let f = full_of(&mut self.resources, r);
        let w = self.waiters.remove(&mut f.waiters, s);
        let empty = f.waiters.is_empty();
        self.waiting.remove(&wait_key(number, r, s, &w.info));
        if let Some(wi) = f.windex.as_mut() {
            // a candidate's heap entry stays, and is dropped when a pass pops it
            if w.candidate {
                wi.marked -= 1;
            }
            wi.by_owner.remove(&(w.info.nodeid, w.info.owner, seq, s));
            sync_dirty(&mut self.dirty, wi, number);
        }
        if empty {
            f.windex = None;
        }
        self.count_entry(r, w.info.nodeid, false);
        w
    }

    /// Marks every waiter overlapping `range` as a candidate, outside a pass. A waiter pass
    /// of `r` follows in the same operation (it lists the resource in `dirty` if candidates
    /// are left).
    pub(super) fn release(&mut self, r: u32, range: (u64, u64)) {
        self.mark_overlapping(r, range, false);
    }

    /// Marks every waiter overlapping `[start, end]` as a candidate. Outside a pass, when
    /// that is every waiter, the next pass walks the list and no heap entry is made; inside
    /// one (`in_pass`) each gets its entry, as the pass may be taking them from the heap.
    fn mark_overlapping(&mut self, r: u32, (start, end): (u64, u64), in_pass: bool) {
        let list = self.full(r).waiters;
        if list.is_empty() {
            return;
        }
        // the waiter scratch (the lock scratch may be out in a caller): no allocation per
        // release
        let mut found = std::mem::take(&mut self.waiter_scratch);
        found.clear();
        self.waiters.overlapping(&list, start, end, &mut found);
        if !found.is_empty() {
            let f = full_of(&mut self.resources, r);
            let every = !in_pass && found.len() == f.waiters.len();
            let wi = f.windex.get_or_insert_with(Box::default);
            if every {
                // all waiters are candidates now, so the next pass walks the list: no
                // heap entries (a pass from the heap first makes them)
                for &s in &found {
                    flag(&mut self.waiters, wi, s);
                }
                wi.candidates.clear();
                wi.unindexed = true;
            } else {
                for &s in &found {
                    mark(&mut self.waiters, wi, s);
                }
            }
        }
        self.waiter_scratch = found;
    }

    /// `do_waiters`: one FIFO pass granting every candidate that no longer conflicts. A
    /// candidate marked during the pass behind the pass's position waits for the next
    /// pass, as in C's list walk.
    pub(super) fn do_waiters(&mut self, r: u32, now: u64, out: &mut Vec<Reply>) {
        let f = self.full(r);
        let Some(wi) = f.windex.as_ref() else {
            return;
        };
        let walk = wi.marked as usize == f.waiters.len();
        let number = self.res(r).number;
        if walk {
            self.walk_waiters(r, now, out);
        } else {
            self.pop_waiters(r, number, now, out);
        }
        if let Some(wi) = full_of(&mut self.resources, r).windex.as_mut() {
            sync_dirty(&mut self.dirty, wi, number);
        }
    }

    /// The pass when every waiter is a candidate (a release over all of them, as when
    /// processes queue on one range): the FIFO list is the candidates' order, so the pass
    /// walks it, as C does, and the heap's entries go. A waiter marked again behind the
    /// walk gets a new entry and so waits for the next pass.
    fn walk_waiters(&mut self, r: u32, now: u64, out: &mut Vec<Reply>) {
        let f = full_of(&mut self.resources, r);
        let mut s = f.waiters.head();
        if let Some(wi) = f.windex.as_mut() {
            wi.candidates.clear();
            wi.unindexed = false;
        }
        let mut granted = None;
        while s != NIL {
            // taken first: a grant frees `s`, and nothing else leaves the list
            let next = self.waiters.next(s);
            if self.unmark(r, s) {
                self.try_grant(r, s, &mut granted, now, out);
            }
            s = next;
        }
    }

    /// The pass over some of the waiters: each step takes the least candidate from the
    /// heap; one behind the pass's position is put back at the end.
    fn pop_waiters(&mut self, r: u32, number: u64, now: u64, out: &mut Vec<Reply>) {
        self.index_candidates(r);
        let mut behind: Vec<(u32, Slot)> = Vec::new();
        let mut from = 0u32;
        let mut granted = None;
        loop {
            let Some(wi) = full_of(&mut self.resources, r).windex.as_mut() else {
                // no waiter left (a candidate behind the position is a waiter)
                debug_assert!(behind.is_empty());
                return;
            };
            let Some((seq, s)) = pop_candidate(&self.waiters, wi, number) else {
                break;
            };
            if seq < from {
                behind.push((seq, s));
                continue;
            }
            // positions stop below u32::MAX, so seq + 1 does not wrap
            from = seq + 1;
            self.unmark(r, s);
            self.try_grant(r, s, &mut granted, now, out);
        }
        if let Some(wi) = full_of(&mut self.resources, r).windex.as_mut() {
            wi.candidates.extend(behind.into_iter().map(Reverse));
        }
    }

    /// Gives every candidate of `r` its heap entry, if a release left them without.
    fn index_candidates(&mut self, r: u32) {
        let f = full_of(&mut self.resources, r);
        let Some(wi) = f.windex.as_mut().filter(|wi| wi.unindexed) else {
            return;
        };
        wi.candidates.clear();
        for s in self.waiters.iter(&f.waiters) {
            if self.waiters.get(s).candidate {
                wi.candidates.push(Reverse((self.waiters.seq(s), s)));
            }
        }
        wi.unindexed = false;
    }

    /// Clears the candidate flag of waiter `s` of `r`; whether it was set.
    fn unmark(&mut self, r: u32, s: Slot) -> bool {
        let w = self.waiters.get_mut(s);
        let was = std::mem::replace(&mut w.candidate, false);
        if was && let Some(wi) = full_of(&mut self.resources, r).windex.as_mut() {
            wi.marked -= 1;
        }
        was
    }

    /// Grants waiter `s` unless a lock conflicts with it. `granted` is the pass's last
    /// grant: its owner holds that whole range in that mode until the next grant (only
    /// grants change locks during a pass), so a waiter it blocks needs no search.
    fn try_grant(
        &mut self,
        r: u32,
        s: Slot,
        granted: &mut Option<Req>,
        now: u64,
        out: &mut Vec<Reply>,
    ) {
        let info = self.waiters.get(s).info;
        let req = Req::from(&info);
        if granted.is_some_and(|g| blocks(&g, &req)) || self.has_conflict(r, &req) {
            return;
        }
        self.del_waiter(r, s);
        if let Some(range) = self.lock_internal(r, &req, now) {
            self.mark_overlapping(r, range, true);
        }
        if info.nodeid == self.our_nodeid {
            out.push(Reply {
                info: PlockInfo { rv: 0, ..info },
            });
        }
        *granted = Some(req);
    }

    /// `clear_waiters`: drops every waiter of the owner on the resource, without replies.
    pub(super) fn clear_waiters(&mut self, r: u32, nodeid: i32, owner: u64) {
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
}

/// Makes waiter `s` a candidate of the next pass, once, with its heap entry.
fn mark(waiters: &mut Arena<Waiter>, wi: &mut WaiterIndex, s: Slot) {
    if flag(waiters, wi, s) {
        wi.candidates.push(Reverse((waiters.seq(s), s)));
    }
}

/// Sets the candidate flag of waiter `s`; whether it was clear.
fn flag(waiters: &mut Arena<Waiter>, wi: &mut WaiterIndex, s: Slot) -> bool {
    let w = waiters.get_mut(s);
    let new = !w.candidate;
    if new {
        w.candidate = true;
        wi.marked += 1;
    }
    new
}

/// The least candidate of resource `number` still waiting, taken off the heap (entries of
/// deleted waiters are dropped on the way; the waiter keeps its flag).
fn pop_candidate(
    waiters: &Arena<Waiter>,
    wi: &mut WaiterIndex,
    number: u64,
) -> Option<(u32, Slot)> {
    while let Some(Reverse((seq, s))) = wi.candidates.pop() {
        let live = waiters
            .try_get(s)
            .is_some_and(|w| w.candidate && w.info.number == number);
        if live && waiters.seq(s) == seq {
            return Some((seq, s));
        }
    }
    None
}

/// Lists resource `number` in `dirty` exactly while it has candidates.
fn sync_dirty(dirty: &mut BTreeSet<u64>, wi: &mut WaiterIndex, number: u64) {
    let want = wi.marked > 0;
    if want != wi.listed {
        wi.listed = want;
        if want {
            dirty.insert(number);
        } else {
            dirty.remove(&number);
        }
    }
}

/// Whether `req` overlaps and conflicts with `g`, a range its owner holds in its mode.
fn blocks(g: &Req, req: &Req) -> bool {
    g.start <= req.end
        && req.start <= g.end
        && !(g.nodeid == req.nodeid && g.owner == req.owner)
        && (g.ex || req.ex)
}
