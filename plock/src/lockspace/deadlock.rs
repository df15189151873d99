//! Deadlock detection across the cluster (opt-in, `plock_deadlock_detect=1` on every
//! member): a blocking LOCK that would close a cycle of waiting owners is answered
//! -EDEADLK instead of queued — Linux's `posix_locks_deadlock` rule, on the replicated
//! table: from the request's first blocker, follow what that lock's owner waits for (its
//! first waiter in replicated order — by resource number, range and mode — and that
//! waiter's first blocker in list order), at most
//! [`MAX_DEADLK_ITERATIONS`] steps; a deadlock when the chain comes back to the request's
//! owner. Every input is replicated state, so every replica decides alike.

use super::{Lockspace, Req, WaitKey, Waiter};
use crate::arena::Slot;

/// Linux's bound on the chain followed (`MAX_DEADLK_ITERATIONS`).
pub(super) const MAX_DEADLK_ITERATIONS: usize = 10;

/// A waiter's key in the owner index.
pub(super) fn wait_key(
    number: u64,
    r: u32,
    s: Slot,
    info: &dlm_proto::kernel::PlockInfo,
) -> WaitKey {
    (
        info.nodeid,
        info.owner,
        number,
        info.start,
        info.end,
        info.ex,
        r,
        s,
    )
}

impl Lockspace {
    /// Deadlock detection on or off: the daemon sets it before each apply from the started
    /// change (every member offered it), so it changes only in the total order.
    pub fn set_deadlock_detect(&mut self, on: bool) {
        self.deadlock_detect = on;
    }

    /// Whether `req`, blocked by lock `blocker`, would close a cycle of waiting owners.
    pub(super) fn would_deadlock(&mut self, req: &Req, blocker: Slot) -> bool {
        let me = (req.nodeid, req.owner);
        let lock = self.locks.get(blocker);
        let mut owner = (lock.nodeid, lock.owner);
        for _ in 0..MAX_DEADLK_ITERATIONS {
            if owner == me {
                return true;
            }
            // what that owner waits for: its first waiter, and the lock blocking it
            let Some(&(.., r, s)) = self
                .waiting
                .range(
                    (owner.0, owner.1, 0, 0, 0, false, 0, 0)
                        ..=(
                            owner.0,
                            owner.1,
                            u64::MAX,
                            u64::MAX,
                            u64::MAX,
                            true,
                            u32::MAX,
                            Slot::MAX,
                        ),
                )
                .next()
            else {
                return false;
            };
            let w: &Waiter = self.waiters.get(s);
            let wreq = Req::from(&w.info);
            let Some(next) = self.first_conflict(r, &wreq) else {
                return false;
            };
            let l = self.locks.get(next);
            owner = (l.nodeid, l.owner);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use dlm_proto::errno::EDEADLK;
    use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};

    use crate::Lockspace;

    /// A blocking write lock of byte 0 of inode `number` by `owner` on `node`.
    fn lock(node: i32, owner: u64, number: u64) -> PlockInfo {
        PlockInfo {
            version: PLOCK_VERSION,
            op: PlockOp::LOCK,
            ex: true,
            wait: true,
            flags: PlockFlags(0),
            pid: u32::try_from(owner).unwrap_or(0),
            nodeid: node,
            rv: 0,
            fsid: 7,
            number,
            start: 0,
            end: 0,
            owner,
        }
    }

    /// Applies `i` on a replica of node `our`; its replies.
    fn apply(ls: &mut Lockspace, i: &PlockInfo) -> Vec<i32> {
        let mut out = Vec::new();
        let from = u32::try_from(i.nodeid).unwrap_or(0);
        ls.apply(0, from, i, &mut out).expect("apply");
        out.iter().map(|r| r.info.rv).collect()
    }

    /// `n` owners on alternating nodes each hold inode k and ask for inode k+1 (mod n):
    /// the last request closes the ring. The replies on node 1's and node 2's replicas.
    fn ring(n: u64, detect: bool) -> (Vec<i32>, Vec<i32>, Lockspace) {
        let mut a = Lockspace::new(1, 7, 11);
        let mut b = Lockspace::new(2, 7, 22);
        a.set_deadlock_detect(detect);
        b.set_deadlock_detect(detect);
        let node = |k: u64| if k % 2 == 0 { 1 } else { 2 };
        for k in 0..n {
            let i = lock(node(k), 10 + k, k);
            apply(&mut a, &i);
            apply(&mut b, &i);
        }
        let (mut ra, mut rb) = (Vec::new(), Vec::new());
        for k in 0..n {
            let i = lock(node(k), 10 + k, (k + 1) % n);
            ra.extend(apply(&mut a, &i));
            rb.extend(apply(&mut b, &i));
        }
        assert_eq!(a.digest(), b.digest(), "replicas agree");
        (ra, rb, a)
    }

    #[test]
    fn a_crosswise_pair_is_refused_with_edeadlk_on_every_replica() {
        let (ra, rb, a) = ring(2, true);
        // owner 10 (node 1) waits; owner 11 (node 2) would close the cycle
        assert!(ra.is_empty(), "node 1's request waits: {ra:?}");
        assert_eq!(rb, vec![-EDEADLK]);
        assert_eq!(a.waiter_count(), 1);
        // without detection both wait, as C and Linux across nodes
        let (ra, rb, a) = ring(2, false);
        assert!(ra.is_empty() && rb.is_empty());
        assert_eq!(a.waiter_count(), 2);
    }

    #[test]
    fn a_ring_is_found_up_to_linux_depth_only() {
        // a ring of n owners: the chain from the last request's blocker has n-1 steps
        for n in [3, 10] {
            let (ra, rb, _) = ring(n, true);
            let all: Vec<i32> = ra.into_iter().chain(rb).collect();
            assert_eq!(all, vec![-EDEADLK], "ring of {n}");
        }
        // Linux follows at most 10 steps: a ring of 12 owners is not seen
        let (ra, rb, a) = ring(12, true);
        assert!(ra.is_empty() && rb.is_empty());
        assert_eq!(a.waiter_count(), 12);
    }

    #[test]
    fn the_wait_picture_reads_no_more_lines_than_its_bound() {
        let mut a = Lockspace::new(1, 7, 5);
        for b in 0..50 {
            let i = PlockInfo {
                start: b,
                end: b,
                wait: false,
                ..lock(1, 10, 1)
            };
            assert_eq!(apply(&mut a, &i), vec![0]);
        }
        assert!(apply(&mut a, &lock(2, 20, 1)).is_empty(), "waits");
        assert_eq!(a.waits(0, 100).waits.len(), 1);
        // the waiter's line comes after the 50 locks: a bound of 10 never reaches it
        assert!(a.waits(0, 10).waits.is_empty());
    }

    #[test]
    fn a_wait_that_closes_no_cycle_is_queued_and_granted_later() {
        let mut a = Lockspace::new(1, 7, 3);
        a.set_deadlock_detect(true);
        assert_eq!(apply(&mut a, &lock(1, 10, 1)), vec![0]);
        assert!(apply(&mut a, &lock(1, 11, 1)).is_empty(), "waits");
        // a non-blocking conflict is still EAGAIN
        let try_lock = PlockInfo {
            wait: false,
            ..lock(1, 12, 1)
        };
        assert_eq!(apply(&mut a, &try_lock), vec![-11]);
        let unlock = PlockInfo {
            op: PlockOp::UNLOCK,
            wait: false,
            ..lock(1, 10, 1)
        };
        assert_eq!(
            apply(&mut a, &unlock),
            vec![0, 0],
            "unlock, then the waiter granted"
        );
    }
}
