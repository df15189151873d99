//! `dlm_tool plocks` output: C's text (`copy_plock_state`, plock-spec §6.6) and a structured
//! form with ages, both streamed in O(n) with no size limit, plus the replica digest.

use std::fmt;

use crate::lockspace::Lockspace;

/// One line of the plock dump: a granted lock or a waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpEntry {
    /// Resource (inode) number.
    pub number: u64,
    /// Write lock.
    pub ex: bool,
    /// First byte.
    pub start: u64,
    /// Last byte.
    pub end: u64,
    /// Holding or waiting node.
    pub nodeid: i32,
    /// Pid of the last operation on this fragment.
    pub pid: u32,
    /// Lock owner.
    pub owner: u64,
    /// A waiter rather than a granted lock.
    pub waiting: bool,
    /// Milliseconds since granted (to the second) or since it started waiting, by this
    /// node's clock.
    pub age_ms: u64,
}

impl fmt::Display for DumpEntry {
    /// Exactly C's line, including its newline; `rown` is always 0 (no ownership mode).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} {} {}-{} nodeid {} pid {} owner {:x} rown 0{}",
            self.number,
            if self.ex { "WR" } else { "RD" },
            self.start,
            self.end,
            self.nodeid,
            self.pid,
            self.owner,
            if self.waiting { " WAITING" } else { "" }
        )
    }
}

impl Lockspace {
    /// Every lock and waiter, resources in creation order, locks in list order then waiters
    /// in FIFO order — the order of C's dump. `now` gives the ages.
    pub fn dump(&self, now: u64) -> impl Iterator<Item = DumpEntry> + '_ {
        self.resources_in_order()
            .flat_map(move |r| self.entries_of(r, now))
    }

    /// The resource numbers in creation order: the plan of a dump taken in portions
    /// ([`Self::dump_of`] for each), so that the table changes between portions (a portion
    /// shows each resource as it is then; one gone meanwhile is skipped, one created
    /// meanwhile is not in this dump).
    pub fn resource_numbers(&self) -> Vec<u64> {
        self.resources_in_order()
            .map(|r| self.res(r).number)
            .collect()
    }

    /// The dump lines of resource `number` as [`Self::dump`] has them (none if it is gone).
    pub fn dump_of(&self, number: u64, now: u64) -> impl Iterator<Item = DumpEntry> + '_ {
        self.find(number)
            .into_iter()
            .flat_map(move |r| self.entries_of(r, now))
    }

    fn entries_of(&self, r: u32, now: u64) -> impl Iterator<Item = DumpEntry> + '_ {
        let number = self.res(r).number;
        let locks = self.locks_of(r).map(move |(start, end, l)| DumpEntry {
            number,
            ex: l.ex,
            start,
            end,
            nodeid: l.nodeid,
            pid: l.pid,
            owner: l.owner,
            waiting: false,
            age_ms: l.age_ms(now),
        });
        let waiters = self.waiters_of(r).map(move |w| DumpEntry {
            number,
            ex: w.info.ex,
            start: w.info.start,
            end: w.info.end,
            nodeid: w.info.nodeid,
            pid: w.info.pid,
            owner: w.info.owner,
            waiting: true,
            age_ms: now.saturating_sub(w.since),
        });
        locks.chain(waiters)
    }

    /// C's dump text in one string (tests and small tables; the daemon streams [`Self::dump`]).
    pub fn dump_text(&self) -> String {
        self.dump(0).map(|e| e.to_string()).collect()
    }

    /// A digest of the replicated state: resources in number order, each with its locks in
    /// list order and its waiters in FIFO order (every replicated field, no ages). Replicas
    /// that applied the same messages have equal digests.
    pub fn digest(&self) -> u64 {
        let mut h = Fnv::default();
        let mut numbers: Vec<(u64, u32)> = self
            .resources_in_order()
            .map(|r| (self.res(r).number, r))
            .collect();
        numbers.sort_unstable();
        for (number, r) in numbers {
            h.u64(number);
            h.u64(self.locks_of(r).count() as u64);
            for (start, end, l) in self.locks_of(r) {
                for v in [start, end, l.owner, u64::from(l.pid), u64::from(l.ex)] {
                    h.u64(v);
                }
                h.u64(u64::from(l.nodeid.unsigned_abs()));
            }
            h.u64(self.waiters_of(r).count() as u64);
            for w in self.waiters_of(r) {
                let i = &w.info;
                for v in [i.start, i.end, i.owner, u64::from(i.pid), u64::from(i.ex)] {
                    h.u64(v);
                }
                h.u64(u64::from(i.nodeid.unsigned_abs()));
            }
        }
        h.0
    }
}

/// FNV-1a, 64-bit: fixed, seedless, stable across runs and machines.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn u64(&mut self, v: u64) {
        for b in v.to_le_bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}
