//! A reference model of the C daemon's plock table, written straight from plock-spec §2
//! with C's own representation: a list of resources in creation order, and per resource a
//! list of locks in insertion order and a FIFO list of waiters, every operation a scan.
//! It is slow on purpose and short enough to check against the spec line by line.

#![allow(dead_code, unreachable_pub)]
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss
)]

use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::wire::{PlockData, RD_CONTINUE, ResourceData};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MLock {
    pub start: u64,
    pub end: u64,
    pub owner: u64,
    pub nodeid: i32,
    pub pid: u32,
    pub ex: bool,
}

#[derive(Debug, Clone)]
pub struct MRes {
    pub number: u64,
    pub locks: Vec<MLock>,
    pub waiters: Vec<PlockInfo>,
}

#[derive(Debug, Clone)]
pub struct Model {
    pub our: i32,
    pub fsid: u32,
    pub res: Vec<MRes>,
    /// Deadlock detection: a blocking LOCK closing a cycle of waiting owners gets -EDEADLK.
    pub deadlock: bool,
}

fn overlap(s1: u64, e1: u64, s2: u64, e2: u64) -> bool {
    !(e1 < s2 || s1 > e2)
}

/// overlap_type
fn class(s1: u64, e1: u64, s2: u64, e2: u64) -> u8 {
    if s1 == s2 && e1 == e2 {
        0
    } else if (s1 == s2 && e1 < e2) || (s1 > s2 && e1 == e2) {
        1
    } else if s1 > s2 && e1 < e2 {
        2
    } else if s1 <= s2 && e1 >= e2 {
        3
    } else {
        4
    }
}

/// shrink_range2
fn shrink(s2: u64, e2: u64, s: u64, e: u64) -> (u64, u64) {
    if s2 < s { (s2, s - 1) } else { (e + 1, e2) }
}

impl MRes {
    /// is_conflict: index of the first conflicting lock in list order
    fn conflict(&self, i: &PlockInfo) -> Option<usize> {
        self.locks.iter().position(|l| {
            !(l.nodeid == i.nodeid && l.owner == i.owner)
                && overlap(l.start, l.end, i.start, i.end)
                && (i.ex || l.ex)
        })
    }

    fn add(&mut self, i: &PlockInfo, ex: bool, start: u64, end: u64) {
        self.locks.push(MLock {
            start,
            end,
            owner: i.owner,
            nodeid: i.nodeid,
            pid: i.pid,
            ex,
        });
    }

    /// lock_internal
    fn lock_internal(&mut self, i: &PlockInfo) {
        let mut k = 0;
        while k < self.locks.len() {
            let e = self.locks[k];
            if e.nodeid != i.nodeid
                || e.owner != i.owner
                || !overlap(e.start, e.end, i.start, i.end)
            {
                k += 1;
                continue;
            }
            match class(i.start, i.end, e.start, e.end) {
                0 => {
                    self.locks[k].ex = i.ex;
                    return;
                }
                1 => {
                    if e.ex != i.ex {
                        let (s2, e2) = shrink(e.start, e.end, i.start, i.end);
                        self.locks[k].start = i.start;
                        self.locks[k].end = i.end;
                        self.locks[k].ex = i.ex;
                        self.add(i, !i.ex, s2, e2);
                    }
                    return;
                }
                2 => {
                    if e.ex != i.ex {
                        self.add(i, !i.ex, e.start, i.start - 1);
                        self.add(i, !i.ex, i.end + 1, e.end);
                        self.locks[k].start = i.start;
                        self.locks[k].end = i.end;
                        self.locks[k].ex = i.ex;
                    }
                    return;
                }
                3 => {
                    self.locks.remove(k);
                }
                _ => {
                    if e.start < i.start {
                        self.locks[k].end = i.start - 1;
                    } else {
                        self.locks[k].start = i.end + 1;
                    }
                    k += 1;
                }
            }
        }
        self.add(i, i.ex, i.start, i.end);
    }

    /// unlock_internal
    fn unlock_internal(&mut self, i: &PlockInfo) {
        let mut k = 0;
        while k < self.locks.len() {
            let e = self.locks[k];
            if e.nodeid != i.nodeid
                || e.owner != i.owner
                || !overlap(e.start, e.end, i.start, i.end)
            {
                k += 1;
                continue;
            }
            match class(i.start, i.end, e.start, e.end) {
                0 => {
                    self.locks.remove(k);
                    return;
                }
                1 => {
                    let (a, b) = shrink(e.start, e.end, i.start, i.end);
                    self.locks[k].start = a;
                    self.locks[k].end = b;
                    return;
                }
                2 => {
                    self.add(i, e.ex, i.end + 1, e.end);
                    self.locks[k].end = i.start - 1;
                    return;
                }
                3 => {
                    self.locks.remove(k);
                }
                _ => {
                    let (a, b) = shrink(e.start, e.end, i.start, i.end);
                    self.locks[k].start = a;
                    self.locks[k].end = b;
                    k += 1;
                }
            }
        }
    }
}

impl Model {
    pub fn new(our: i32, fsid: u32) -> Self {
        Self {
            our,
            fsid,
            res: Vec::new(),
            deadlock: false,
        }
    }

    /// Linux's `posix_locks_deadlock` by scans: from `i`'s first blocker, follow what each
    /// owner waits for (its first waiter by number, range and mode, then that waiter's first
    /// blocker), 10 steps at most; a deadlock when it comes back to `i`'s owner.
    fn would_deadlock(&self, r: usize, i: &PlockInfo) -> bool {
        let me = (i.nodeid, i.owner);
        let Some(b) = self.res[r].conflict(i) else {
            return false;
        };
        let mut owner = (self.res[r].locks[b].nodeid, self.res[r].locks[b].owner);
        for _ in 0..10 {
            if owner == me {
                return true;
            }
            let Some(w) = self
                .res
                .iter()
                .flat_map(|x| x.waiters.iter())
                .filter(|w| (w.nodeid, w.owner) == owner)
                .min_by_key(|w| (w.number, w.start, w.end, w.ex))
            else {
                return false;
            };
            let Some(rr) = self.find(w.number) else {
                return false;
            };
            let Some(b) = self.res[rr].conflict(w) else {
                return false;
            };
            owner = (self.res[rr].locks[b].nodeid, self.res[rr].locks[b].owner);
        }
        false
    }

    fn find(&self, number: u64) -> Option<usize> {
        self.res.iter().position(|r| r.number == number)
    }

    fn find_or_create(&mut self, number: u64) -> usize {
        self.find(number).unwrap_or_else(|| {
            self.res.push(MRes {
                number,
                locks: Vec::new(),
                waiters: Vec::new(),
            });
            self.res.len() - 1
        })
    }

    fn put(&mut self, r: usize) {
        if self.res[r].locks.is_empty() && self.res[r].waiters.is_empty() {
            self.res.remove(r);
        }
    }

    /// do_waiters: one pass in FIFO order
    fn do_waiters(&mut self, r: usize, out: &mut Vec<PlockInfo>) {
        let mut k = 0;
        while k < self.res[r].waiters.len() {
            let w = self.res[r].waiters[k];
            if self.res[r].conflict(&w).is_some() {
                k += 1;
                continue;
            }
            self.res[r].waiters.remove(k);
            self.res[r].lock_internal(&w);
            if w.nodeid == self.our {
                out.push(PlockInfo { rv: 0, ..w });
            }
        }
    }

    /// _receive_plock (default mode); returns the replies this node writes.
    pub fn apply(&mut self, i: &PlockInfo, out: &mut Vec<PlockInfo>) {
        let ours = i.nodeid == self.our;
        match i.op {
            PlockOp::LOCK => {
                let r = self.find_or_create(i.number);
                if self.res[r].conflict(i).is_some() {
                    if i.wait && self.deadlock && self.would_deadlock(r, i) {
                        if ours {
                            out.push(PlockInfo { rv: -35, ..*i });
                        }
                    } else if i.wait {
                        self.res[r].waiters.push(*i);
                    } else if ours {
                        out.push(PlockInfo { rv: -11, ..*i });
                    }
                } else {
                    self.res[r].lock_internal(i);
                    if ours {
                        out.push(PlockInfo { rv: 0, ..*i });
                    }
                }
                self.do_waiters(r, out);
                self.put(r);
            }
            PlockOp::UNLOCK => {
                let r = self.find_or_create(i.number);
                self.res[r].unlock_internal(i);
                if i.flags.close() {
                    self.res[r]
                        .waiters
                        .retain(|w| !(w.nodeid == i.nodeid && w.owner == i.owner));
                } else if ours {
                    out.push(PlockInfo { rv: 0, ..*i });
                }
                self.do_waiters(r, out);
                self.put(r);
            }
            PlockOp::GET => {
                if !ours {
                    return;
                }
                let mut rep = PlockInfo { rv: 0, ..*i };
                if let Some(r) = self.find(i.number) {
                    if let Some(k) = self.res[r].conflict(i) {
                        let l = self.res[r].locks[k];
                        rep.ex = l.ex;
                        rep.pid = l.pid;
                        rep.start = l.start;
                        rep.end = l.end;
                        rep.rv = 1;
                    }
                }
                out.push(rep);
            }
            PlockOp::CANCEL => {
                let mut rv = -2;
                if let Some(r) = self.find(i.number) {
                    let hit = self.res[r].waiters.iter().position(|w| {
                        w.nodeid == i.nodeid
                            && w.fsid == i.fsid
                            && w.number == i.number
                            && w.owner == i.owner
                            && w.pid == i.pid
                            && w.start == i.start
                            && w.end == i.end
                            && w.ex == i.ex
                    });
                    if let Some(k) = hit {
                        self.res[r].waiters.remove(k);
                        rv = 0;
                    }
                    self.put(r);
                }
                if ours {
                    out.push(PlockInfo { rv, ..*i });
                }
            }
            _ => {
                if ours {
                    out.push(PlockInfo { rv: -22, ..*i });
                }
            }
        }
    }

    /// purge_plocks (freeing empty resources in one sweep: C unlinks each in O(1))
    pub fn purge(&mut self, nodeid: i32, out: &mut Vec<PlockInfo>) {
        for r in 0..self.res.len() {
            self.res[r].locks.retain(|l| l.nodeid != nodeid);
            self.res[r].waiters.retain(|w| w.nodeid != nodeid);
            if !self.res[r].waiters.is_empty() {
                self.do_waiters(r, out);
            }
        }
        self.res
            .retain(|r| !(r.locks.is_empty() && r.waiters.is_empty()));
    }

    /// copy_plock_state
    pub fn dump(&self) -> String {
        let mut s = String::new();
        for r in &self.res {
            for l in &r.locks {
                s += &format!(
                    "{} {} {}-{} nodeid {} pid {} owner {:x} rown 0\n",
                    r.number,
                    if l.ex { "WR" } else { "RD" },
                    l.start,
                    l.end,
                    l.nodeid,
                    l.pid,
                    l.owner
                );
            }
            for w in &r.waiters {
                s += &format!(
                    "{} {} {}-{} nodeid {} pid {} owner {:x} rown 0 WAITING\n",
                    r.number,
                    if w.ex { "WR" } else { "RD" },
                    w.start,
                    w.end,
                    w.nodeid,
                    w.pid,
                    w.owner
                );
            }
        }
        s
    }

    /// send_all_plocks_data / pack_send_buf: (resource, entries) per message
    pub fn snapshot(&self) -> Vec<(ResourceData, Vec<PlockData>)> {
        let mut out = Vec::new();
        for r in &self.res {
            let mut all: Vec<PlockData> = r
                .locks
                .iter()
                .map(|l| PlockData {
                    start: l.start,
                    end: l.end,
                    owner: l.owner,
                    pid: l.pid,
                    nodeid: l.nodeid as u32,
                    ex: l.ex,
                    waiter: false,
                })
                .collect();
            all.extend(r.waiters.iter().map(|w| PlockData {
                start: w.start,
                end: w.end,
                owner: w.owner,
                pid: w.pid,
                nodeid: w.nodeid as u32,
                ex: w.ex,
                waiter: true,
            }));
            let mut first = true;
            loop {
                let n = all.len().min(24);
                let rest = all.split_off(n);
                let flags = if first { 0 } else { RD_CONTINUE };
                out.push((
                    ResourceData {
                        number: r.number,
                        owner: 0,
                        flags,
                    },
                    all,
                ));
                first = false;
                all = rest;
                if all.is_empty() {
                    break;
                }
            }
        }
        out
    }

    /// receive_plocks_data
    pub fn restore(&mut self, rd: &ResourceData, entries: &[PlockData]) {
        let r = if rd.flags & RD_CONTINUE != 0 {
            self.find(rd.number)
                .expect("continuation of a known resource")
        } else {
            self.res.push(MRes {
                number: rd.number,
                locks: Vec::new(),
                waiters: Vec::new(),
            });
            self.res.len() - 1
        };
        for e in entries {
            if e.waiter {
                self.res[r].waiters.push(PlockInfo {
                    version: PLOCK_VERSION,
                    op: PlockOp::LOCK,
                    ex: e.ex,
                    wait: true,
                    flags: PlockFlags(0),
                    pid: e.pid,
                    nodeid: e.nodeid as i32,
                    rv: 0,
                    fsid: self.fsid,
                    number: rd.number,
                    start: e.start,
                    end: e.end,
                    owner: e.owner,
                });
            } else {
                self.res[r].locks.push(MLock {
                    start: e.start,
                    end: e.end,
                    owner: e.owner,
                    nodeid: e.nodeid as i32,
                    pid: e.pid,
                    ex: e.ex,
                });
            }
        }
    }
}
