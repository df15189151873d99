//! One resource's whole replicated state, out and back in: native mode's STATE records
//! (docs/native-mode.md). The owner of a resource sends what it holds; every other replica
//! makes its copy exactly that, with no waiter pass and no reply.

use dlm_proto::wire::PlockData;

use super::*;

/// One lock or waiter of a resource's state; a waiter says whether it is a candidate of
/// the resource's next waiter pass (replicated state too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The lock or waiter.
    pub data: PlockData,
    /// A waiter to examine at the next pass.
    pub candidate: bool,
    /// Milliseconds since it was granted (a lock, to the second) or started waiting.
    pub age_ms: u64,
}

impl Lockspace {
    /// How many locks and waiters resource `number` has, and the node they all belong to
    /// when they belong to one (none for an empty or a missing resource). O(1).
    pub fn holders(&self, number: u64) -> (usize, Option<i32>) {
        let Some(r) = self.find(number) else {
            return (0, None);
        };
        match &self.res(r).body {
            Body::One(o) => (1, Some(o.lock.nodeid)),
            Body::Full(f) => match &f.nodes {
                NodeCounts::Empty => (0, None),
                NodeCounts::One(n, c) => (*c as usize, Some(*n)),
                // a map left with one node (it never shrinks back to `One`)
                NodeCounts::Many(m) => {
                    let only = m.iter().filter(|&(_, &c)| c > 0).map(|(&n, _)| n);
                    let single = (only.clone().count() == 1).then(|| only.min()).flatten();
                    (m.values().map(|&c| c as usize).sum(), single)
                }
            },
        }
    }

    /// How many of resource `number`'s [`Self::holders`] are waiters. O(1).
    pub fn waiter_count_of(&self, number: u64) -> usize {
        match self.find(number).map(|r| &self.res(r).body) {
            Some(Body::Full(f)) => f.waiters.len(),
            _ => 0,
        }
    }

    /// The locks (list order) and waiters (FIFO order) of resource `number` into `out`
    /// (emptied first; nothing for a resource the table does not have), with their ages
    /// at `now`.
    pub fn resource_state(&self, now: u64, number: u64, out: &mut Vec<Held>) {
        out.clear();
        let Some(r) = self.find(number) else {
            return;
        };
        let nodeid = |n: i32| u32::try_from(n).unwrap_or(0);
        out.extend(self.locks_of(r).map(|(start, end, l)| Held {
            data: PlockData {
                start,
                end,
                owner: l.owner,
                pid: l.pid,
                nodeid: nodeid(l.nodeid),
                ex: l.ex,
                waiter: false,
            },
            candidate: false,
            age_ms: l.age_ms(now),
        }));
        let Body::Full(f) = &self.res(r).body else {
            return;
        };
        for s in self.waiters.iter(&f.waiters) {
            let waiter = self.waiters.get(s);
            let (w, candidate) = (&waiter.info, waiter.candidate);
            let age_ms = now.saturating_sub(waiter.since);
            out.push(Held {
                data: PlockData {
                    start: w.start,
                    end: w.end,
                    owner: w.owner,
                    pid: w.pid,
                    nodeid: nodeid(w.nodeid),
                    ex: w.ex,
                    waiter: true,
                },
                candidate,
                age_ms,
            });
        }
    }

    /// Makes resource `number` hold exactly `state` (as [`Self::resource_state`] gives
    /// it): whatever it held goes, without a waiter pass or a reply. Each entry's age
    /// counts back from `now`.
    pub fn replace_resource(
        &mut self,
        now: u64,
        number: u64,
        state: &[Held],
    ) -> Result<(), RestoreError> {
        if let Some(e) = state.iter().find(|e| i32::try_from(e.data.nodeid).is_err()) {
            return Err(RestoreError::NodeId(e.data.nodeid));
        }
        if let Some(r) = self.find(number) {
            self.clear_resource(r);
        }
        if state.is_empty() {
            return Ok(());
        }
        let r = self.find_or_create(number);
        self.promote(r);
        for e in state {
            let nodeid = i32::try_from(e.data.nodeid).unwrap_or(i32::MAX);
            let since = now.saturating_sub(e.age_ms);
            if e.data.waiter {
                let info = PlockInfo {
                    version: PLOCK_VERSION,
                    op: PlockOp::LOCK,
                    ex: e.data.ex,
                    wait: true,
                    flags: PlockFlags(0),
                    pid: e.data.pid,
                    nodeid,
                    rv: 0,
                    fsid: self.fsid,
                    number,
                    start: e.data.start,
                    end: e.data.end,
                    owner: e.data.owner,
                };
                self.add_waiter(r, info, since, e.candidate);
            } else {
                self.restore_entry(r, &e.data, nodeid, since);
            }
        }
        self.settle(r);
        Ok(())
    }

    /// Hashes the replicated state and what decides the next operations into `h`: the
    /// resources in list order, each with its locks in list order and its waiters in FIFO
    /// order with their candidate flags (not ages, not the arena's layout). Tables with
    /// equal fingerprints answer every future operation alike.
    pub fn fingerprint(&self, h: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        let mut state = Vec::new();
        for number in self.resource_numbers() {
            number.hash(h);
            self.resource_state(0, number, &mut state);
            for e in &state {
                let d = &e.data;
                (d.start, d.end, d.owner, d.pid, d.nodeid, d.ex, d.waiter).hash(h);
                e.candidate.hash(h);
            }
            state.len().hash(h);
        }
    }

    /// The waiter pass of resource `number` (`do_waiters`), if it has waiters a pass would
    /// examine; replies for the waiters it grants go onto `out`. Native mode runs it when
    /// an owner gives a resource back: a purge left the resource's pass to its owner.
    pub fn pass(&mut self, now: u64, number: u64, out: &mut Vec<Reply>) {
        if !self.dirty.contains(&number) {
            return;
        }
        if let Some(r) = self.find(number) {
            if matches!(self.res(r).body, Body::Full(_)) && !self.full(r).waiters.is_empty() {
                self.do_waiters(r, now, out);
            }
            self.settle(r);
        }
    }

    /// Every lock and waiter of `r` goes (no pass), and so does the resource.
    fn clear_resource(&mut self, r: u32) {
        self.promote(r);
        let (locks, waiters) = {
            let f = self.full(r);
            let locks: Vec<Slot> = self.locks.iter(&f.locks).collect();
            let waiters: Vec<Slot> = self.waiters.iter(&f.waiters).collect();
            (locks, waiters)
        };
        for s in locks {
            self.del_lock(r, s);
        }
        for s in waiters {
            self.del_waiter(r, s);
        }
        self.settle(r);
    }
}
