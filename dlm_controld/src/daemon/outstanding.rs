//! The local requests a lockspace's task has taken and not yet answered: for the latency
//! histogram, and so that each one gets a reply when the lockspace ends. Kept in a B-tree
//! by the fields a reply echoes, oldest first among identical requests: no hashing per
//! request (SipHash of the key was a large share of a request's instructions), and
//! a local user, who chooses those fields, cannot make its cost depend on collisions.
//! The first few are kept in a short list before the tree: a lockspace's processes mostly
//! have one request each outstanding, and a tree of one entry would allocate and free a
//! node for every request.

use crate::clock::Stamp;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, VecDeque};

use dlm_proto::kernel::{PlockInfo, PlockOp};

/// What identifies a local request until its reply: the reply echoes these fields. File
/// and owner first, so that a CLOSE finds its owner's requests as one range.
type Key = (u64, u64, u8, u32, u64, u64, bool);

fn key_of(i: &PlockInfo) -> Key {
    if i.op == PlockOp::GET {
        // a GET's reply carries the conflicting lock's range and pid
        (i.number, i.owner, i.op.0, 0, 0, 0, i.wait)
    } else {
        (i.number, i.owner, i.op.0, i.pid, i.start, i.end, i.wait)
    }
}

/// Requests kept in the short list at most.
const SHORT: usize = 8;

/// Requests taken, each with the time it was read, until their replies. Each request of
/// a key in `short` is older than every one of that key in the tree: a request goes to the
/// tree when the list is full or the tree has its key.
#[derive(Debug, Default)]
pub(crate) struct Outstanding {
    /// In the order read, searched in that order.
    short: Vec<(Key, Stamp, PlockInfo)>,
    requests: BTreeMap<Key, Same>,
}

/// The requests with one key: the oldest, and (rarely: two threads of one process asking
/// the same) those after it, in order.
#[derive(Debug)]
struct Same {
    first: (Stamp, PlockInfo),
    more: VecDeque<(Stamp, PlockInfo)>,
}

impl Outstanding {
    /// A request read at `t0` now waits for its reply.
    pub(crate) fn insert(&mut self, t0: Stamp, info: PlockInfo) {
        let key = key_of(&info);
        if self.short.len() < SHORT && !self.requests.contains_key(&key) {
            self.short.push((key, t0, info));
            return;
        }
        match self.requests.entry(key) {
            Entry::Vacant(v) => {
                v.insert(Same {
                    first: (t0, info),
                    more: VecDeque::new(),
                });
            }
            Entry::Occupied(mut o) => o.get_mut().more.push_back((t0, info)),
        }
    }

    /// The oldest request `reply` answers, gone from here: when it was read.
    pub(crate) fn answered(&mut self, reply: &PlockInfo) -> Option<Stamp> {
        self.take_oldest(key_of(reply)).map(|(t0, _)| t0)
    }

    /// A CANCEL of a waiter: the LOCK it names is answered by no reply. When that LOCK
    /// was read, if it was still waiting here.
    pub(crate) fn cancelled(&mut self, cancel: &PlockInfo) -> Option<Stamp> {
        let waiter = PlockInfo {
            op: PlockOp::LOCK,
            wait: true,
            ..*cancel
        };
        self.take_oldest(key_of(&waiter)).map(|(t0, _)| t0)
    }

    /// A CLOSE: nothing of `owner` on file `number` is answered any more (a range of the
    /// tree, not a walk of every outstanding request).
    pub(crate) fn closed(&mut self, number: u64, owner: u64) {
        self.short.retain(|(k, ..)| (k.0, k.1) != (number, owner));
        let first = (number, owner, 0, 0, 0, 0, false);
        let last = (number, owner, u8::MAX, u32::MAX, u64::MAX, u64::MAX, true);
        let keys: Vec<Key> = self.requests.range(first..=last).map(|(k, _)| *k).collect();
        for k in keys {
            self.requests.remove(&k);
        }
    }

    /// Every request still waiting, in no particular order; none waits afterwards.
    pub(crate) fn take_all(&mut self) -> Vec<PlockInfo> {
        let short = self.short.drain(..).map(|(_, _, info)| info);
        let tree = std::mem::take(&mut self.requests)
            .into_values()
            .flat_map(|s| std::iter::once(s.first).chain(s.more))
            .map(|(_, info)| info);
        short.chain(tree).collect()
    }

    /// A look through the short list, else one search of the tree, per request answered.
    fn take_oldest(&mut self, key: Key) -> Option<(Stamp, PlockInfo)> {
        if let Some(i) = self.short.iter().position(|(k, ..)| *k == key) {
            let (_, t0, info) = self.short.remove(i);
            return Some((t0, info));
        }
        let Entry::Occupied(mut o) = self.requests.entry(key) else {
            return None;
        };
        let same = o.get_mut();
        match same.more.pop_front() {
            Some(next) => Some(std::mem::replace(&mut same.first, next)),
            None => Some(o.remove().first),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(owner: u64, start: u64, wait: bool) -> PlockInfo {
        PlockInfo {
            version: dlm_proto::kernel::PLOCK_VERSION,
            op: PlockOp::LOCK,
            ex: true,
            wait,
            flags: dlm_proto::kernel::PlockFlags(0),
            pid: 40,
            nodeid: 1,
            rv: 0,
            fsid: 1,
            number: 7,
            start,
            end: start + 9,
            owner,
        }
    }

    #[test]
    fn identical_requests_are_answered_oldest_first() {
        let mut o = Outstanding::default();
        let t = Stamp::now();
        let later = t + std::time::Duration::from_millis(5);
        o.insert(t, lock(1, 0, false));
        o.insert(later, lock(1, 0, false));
        o.insert(later, lock(2, 0, false));
        assert_eq!(o.answered(&lock(1, 0, false)), Some(t));
        assert_eq!(o.answered(&lock(1, 0, false)), Some(later));
        assert_eq!(o.answered(&lock(1, 0, false)), None);
        // another range of the same owner is another request
        assert_eq!(o.answered(&lock(2, 10, false)), None);
        assert_eq!(o.take_all(), vec![lock(2, 0, false)]);
        assert!(o.take_all().is_empty());
    }

    #[test]
    fn a_get_is_matched_whatever_its_reply_carries() {
        let mut o = Outstanding::default();
        let get = PlockInfo {
            op: PlockOp::GET,
            ..lock(1, 0, false)
        };
        o.insert(Stamp::now(), get);
        // the reply names the conflicting lock: another range and pid
        let reply = PlockInfo {
            start: 100,
            end: 200,
            pid: 99,
            ..get
        };
        assert!(o.answered(&reply).is_some());
        assert!(o.take_all().is_empty());
    }

    #[test]
    fn a_cancel_takes_its_waiter_and_a_close_its_owners_requests() {
        let mut o = Outstanding::default();
        let t = Stamp::now();
        o.insert(t, lock(1, 0, true));
        o.insert(t, lock(1, 20, false));
        o.insert(t, lock(3, 0, false));
        let cancel = PlockInfo {
            op: PlockOp::CANCEL,
            wait: false,
            ..lock(1, 0, true)
        };
        assert_eq!(o.cancelled(&cancel), Some(t));
        assert_eq!(o.answered(&lock(1, 0, true)), None);
        assert_eq!(o.cancelled(&cancel), None, "nothing left to cancel");
        o.closed(7, 1);
        assert_eq!(o.take_all(), vec![lock(3, 0, false)]);
    }

    #[test]
    fn identical_requests_stay_oldest_first_across_the_list_and_the_tree() {
        let mut o = Outstanding::default();
        let t = Stamp::now();
        let at = |n: u64| t + std::time::Duration::from_millis(n);
        // the list full of other owners' requests, then owner 1's first goes to the tree
        for owner in 10..10 + SHORT as u64 {
            o.insert(at(0), lock(owner, 0, false));
        }
        o.insert(at(1), lock(1, 0, false));
        // room again in the list: owner 1's second must still queue behind its first
        assert_eq!(o.answered(&lock(10, 0, false)), Some(at(0)));
        o.insert(at(2), lock(1, 0, false));
        assert_eq!(o.answered(&lock(1, 0, false)), Some(at(1)));
        assert_eq!(o.answered(&lock(1, 0, false)), Some(at(2)));
        assert_eq!(o.answered(&lock(1, 0, false)), None);
        // a close takes an owner's requests from both
        o.insert(at(3), lock(2, 0, false));
        o.insert(at(4), lock(2, 50, true));
        o.closed(7, 2);
        assert_eq!(o.answered(&lock(2, 0, false)), None);
        let mut rest: Vec<u64> = o.take_all().iter().map(|i| i.owner).collect();
        rest.sort_unstable();
        assert_eq!(rest, (11..10 + SHORT as u64).collect::<Vec<_>>());
        assert!(o.take_all().is_empty());
    }
}
