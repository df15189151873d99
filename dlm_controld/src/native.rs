//! Native mode's bookkeeping (docs/native-mode.md), sans I/O: who decides which resource
//! and the requests waiting for an owner to give one back (replicated: every member holds
//! the same at each point of the total order), and this node's own records for local
//! decisions (our requests still in CPG, the kernel's reply order, resources seen shared).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use dlm_plock::KeyedNumbers;
use dlm_proto::kernel::PlockInfo;

/// Resources one node may own; a claim beyond is refused (memory a local user's requests
/// can make the other nodes hold is bounded).
pub const OWNED_MAX: usize = 16_384;
/// A resource is claimed only with at most this many locks and waiters.
pub const CLAIM_MAX: usize = 64;
/// An owner gives a resource back when it grows past this many locks and waiters (its
/// STATE must fit in one message: at most [`dlm_proto::wire::MAX_STATE_HELD`]).
pub const RELEASE_AT: usize = 200;
/// An owned resource that has held nothing for this long (ms) is given back: a claim
/// costs the other nodes memory and a recall, and one that holds nothing saves nothing.
pub const IDLE_MS: u64 = 10_000;

/// PLOCKS_DATA messages produced at the start of a transfer, before the first `pump`.
pub const TRANSFER_FIRST: usize = 32;

/// The plock path's size bounds and timeouts (native mode's, and the transfer's first
/// portion): the defaults above, or (in the tests that explore every interleaving) a few
/// entries, so that a resource or a table crosses them quickly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Resources one node may own.
    pub owned_max: usize,
    /// A resource is claimed only with at most this many locks and waiters.
    pub claim_max: usize,
    /// An owner gives a resource back when it holds more locks and waiters than this.
    pub release_at: usize,
    /// HELD entries one STATE carries at most: no local decision may take a resource
    /// past it.
    pub state_max: usize,
    /// Entries one NATIVE message carries at most.
    pub batch_max: usize,
    /// An owned resource holding nothing this long (ms) is given back.
    pub idle_ms: u64,
    /// PLOCKS_DATA messages a transfer produces at its start; the rest go a portion at a
    /// time, while the deliveries meanwhile are held.
    pub transfer_first: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            owned_max: OWNED_MAX,
            claim_max: CLAIM_MAX,
            release_at: RELEASE_AT,
            state_max: dlm_proto::wire::MAX_STATE_HELD,
            batch_max: dlm_proto::wire::MAX_NATIVE_ENTRIES,
            idle_ms: IDLE_MS,
            transfer_first: TRANSFER_FIRST,
        }
    }
}

/// After another node used a resource, we do not ask to own it for this long.
const SHARED_MS: u64 = 1000;
/// Resources remembered as shared.
const SHARED_MAX: usize = 4096;

/// How a delivered request is applied, fixed at its place in the total order (it may be
/// applied later: held while stopped, by the node sending its table, by a joiner, or in a
/// recall), so that every member applies it alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// A claim may be granted (a native change is started, no change pending).
    pub claims: bool,
    /// A CANCEL is applied (the started change's rule for its sender).
    pub cancel: bool,
    /// Deadlock detection is on (every started member offers it).
    pub deadlock: bool,
}

/// A request delivered for an owned resource, waiting for its owner to give it back:
/// sender, request, whether it claims, the rules of its delivery.
pub type Waiting = (u32, PlockInfo, bool, Rules);

/// Who owns which resource, and the recalls in progress (replicated).
#[derive(Debug, Default, Clone)]
pub struct Owners {
    owner: BTreeMap<u64, u32>,
    recall: BTreeMap<u64, VecDeque<Waiting>>,
    counts: BTreeMap<u32, usize>,
    waiting: usize,
}

impl Owners {
    /// The owner of resource `number`.
    pub fn owner(&self, number: u64) -> Option<u32> {
        self.owner.get(&number).copied()
    }

    /// Requests wait for the owner of `number` to give it back.
    pub fn recalling(&self, number: u64) -> bool {
        self.recall.contains_key(&number)
    }

    /// Resources `node` owns.
    pub fn count(&self, node: u32) -> usize {
        self.counts.get(&node).copied().unwrap_or(0)
    }

    /// Resources owned, by anyone.
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    /// Nobody owns anything.
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    /// Requests waiting in recalls.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// `node` owns `number` from now on.
    pub fn grant(&mut self, number: u64, node: u32) {
        if self.owner.insert(number, node).is_none() {
            *self.counts.entry(node).or_default() += 1;
        }
    }

    /// Queues a request for an owned resource; true when it is the first (a recall).
    /// Bounded by what the members have in CPG: each reads no more than its plock backlog
    /// bound from its kernel, and the owner's RELEASE is on its way.
    pub fn wait(&mut self, number: u64, w: Waiting) -> bool {
        let q = self.recall.entry(number).or_default();
        q.push_back(w);
        self.waiting += 1;
        q.len() == 1
    }

    /// The owner of `number` is cleared; returns the requests that waited for it, in
    /// delivery order.
    pub fn release(&mut self, number: u64) -> VecDeque<Waiting> {
        if let Some(node) = self.owner.remove(&number) {
            if let Some(c) = self.counts.get_mut(&node) {
                *c -= 1;
                if *c == 0 {
                    self.counts.remove(&node);
                }
            }
        }
        let q = self.recall.remove(&number).unwrap_or_default();
        self.waiting -= q.len();
        q
    }

    /// The nodes that own resources, in number order.
    pub fn owning_nodes(&self) -> impl Iterator<Item = u32> + '_ {
        self.counts.keys().copied()
    }

    /// The resources `node` owns, in number order.
    pub fn owned_by(&self, node: u32) -> Vec<u64> {
        if self.count(node) == 0 {
            return Vec::new();
        }
        self.owner
            .iter()
            .filter(|&(_, &o)| o == node)
            .map(|(&n, _)| n)
            .collect()
    }

    /// Forgets every waiting request of `node` (it left the lockspace).
    pub fn drop_requests_of(&mut self, node: u32) {
        let mut dropped = 0;
        for q in self.recall.values_mut() {
            let before = q.len();
            q.retain(|(from, _, _, _)| *from != node);
            dropped += before - q.len();
        }
        self.waiting -= dropped;
    }
}

/// A dump that shows every owner's decisions: our NATIVE SYNC asks each node that owns
/// resources for their STATEs, and the dump is made once each has answered SYNCED (its
/// STATEs came before). One SYNC of ours at a time; a dump asked for meanwhile joins it.
#[derive(Debug, Default, Clone)]
pub struct Fresh {
    next_id: u64,
    pending: Option<FreshWait>,
    /// When our last SYNC was asked for (ms).
    last_ms: Option<u64>,
}

#[derive(Debug, Clone)]
struct FreshWait {
    id: u64,
    /// The owners to hear from, once our SYNC is delivered (`None` until then).
    awaited: Option<std::collections::BTreeSet<u32>>,
    /// When it was asked (ms).
    since_ms: u64,
}

/// How long a dump waits for the owners' answers at most (a node of ours that stopped
/// answering must not hold a dump for ever), in ms.
const FRESH_WAIT_MS: u64 = 3000;
/// A dump asked for this soon after our last SYNC (ms) uses what that one brought: a local
/// user who dumps in a loop makes the owners send their STATEs ten times a second at most.
const FRESH_REUSE_MS: u64 = 100;

impl Fresh {
    /// A dump wants every owner's state: the id of a SYNC to send, or `None` when one of
    /// ours is on its way already (the dump waits for that one).
    pub fn ask(&mut self, now_ms: u64) -> Option<u64> {
        if self.pending.is_some() {
            return None;
        }
        self.last_ms = Some(now_ms);
        self.next_id += 1;
        self.pending = Some(FreshWait {
            id: self.next_id,
            awaited: None,
            since_ms: now_ms,
        });
        Some(self.next_id)
    }

    /// A dump waits.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Our last SYNC, done now, was asked for within 100 ms of `now_ms`: a
    /// dump may use what it brought.
    pub fn recent(&self, now_ms: u64) -> bool {
        self.pending.is_none()
            && self
                .last_ms
                .is_some_and(|t| now_ms.saturating_sub(t) < FRESH_REUSE_MS)
    }

    /// Our SYNC `id` was delivered: the nodes that own resources at that point (every
    /// replica knows the same) are to answer. True when the dump may be made.
    pub fn delivered(&mut self, id: u64, owners: impl Iterator<Item = u32>) -> bool {
        let Some(w) = self.pending.as_mut().filter(|w| w.id == id) else {
            return false;
        };
        let awaited: std::collections::BTreeSet<u32> = owners.collect();
        let done = awaited.is_empty();
        w.awaited = Some(awaited);
        done && self.end()
    }

    /// `node` answered SYNC `id`. True when it was the last one awaited.
    pub fn answered(&mut self, id: u64, node: u32) -> bool {
        let Some(awaited) = self
            .pending
            .as_mut()
            .filter(|w| w.id == id)
            .and_then(|w| w.awaited.as_mut())
        else {
            return false;
        };
        awaited.remove(&node);
        awaited.is_empty() && self.end()
    }

    /// A poll at `now_ms`: true when the wait has lasted too long (the dump goes ahead
    /// with what is here).
    pub fn poll(&mut self, now_ms: u64) -> bool {
        let late = self
            .pending
            .as_ref()
            .is_some_and(|w| now_ms.saturating_sub(w.since_ms) >= FRESH_WAIT_MS);
        late && self.end()
    }

    /// The wait ends (a membership change started: every table is whole); true when a
    /// dump was waiting.
    pub fn end(&mut self) -> bool {
        self.pending.take().is_some()
    }
}

/// The kernel matches the reply to a non-blocking request with the oldest such request of
/// its fsid it handed us (`dev_write`): replies ready out of that order wait here.
#[derive(Debug, Default, Clone)]
pub struct ReplyOrder {
    slots: VecDeque<Slot>,
}

#[derive(Debug, Clone)]
struct Slot {
    op: u8,
    number: u64,
    owner: u64,
    reply: Option<PlockInfo>,
}

impl ReplyOrder {
    /// A request read from the kernel (in read order); only non-blocking ones with a
    /// reply take a place.
    pub fn expect(&mut self, info: &PlockInfo) {
        if !info.wait && !info.flags.close() {
            self.slots.push_back(Slot {
                op: info.op.0,
                number: info.number,
                owner: info.owner,
                reply: None,
            });
        }
    }

    /// A reply is ready; `emit` receives it and every later one it held back, in order.
    pub fn answered(&mut self, reply: PlockInfo, mut emit: impl FnMut(PlockInfo)) {
        if reply.wait {
            emit(reply);
            return;
        }
        let slot = self.slots.iter_mut().find(|s| {
            s.reply.is_none()
                && s.op == reply.op.0
                && s.number == reply.number
                && s.owner == reply.owner
        });
        let Some(slot) = slot else {
            // not one we expected (cannot happen: every request is expected when read)
            emit(reply);
            return;
        };
        slot.reply = Some(reply);
        while let Some(r) = self.slots.front().and_then(|s| s.reply) {
            self.slots.pop_front();
            emit(r);
        }
    }

    /// The reply to the request expected last (a local decision: no earlier request of the
    /// same op, resource and owner can be outstanding, it would still be in CPG), found
    /// without walking the queue; otherwise as [`Self::answered`].
    pub fn answered_last(&mut self, reply: PlockInfo, mut emit: impl FnMut(PlockInfo)) {
        let last = self.slots.back_mut().filter(|s| {
            !reply.wait
                && s.reply.is_none()
                && s.op == reply.op.0
                && s.number == reply.number
                && s.owner == reply.owner
        });
        let Some(slot) = last else {
            return self.answered(reply, emit);
        };
        slot.reply = Some(reply);
        while let Some(r) = self.slots.front().and_then(|s| s.reply) {
            self.slots.pop_front();
            emit(r);
        }
    }

    /// Non-blocking requests not yet answered, or answered and held back.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// No request waits for its reply.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// This node's records for local decisions. Its maps are keyed by inode numbers a local
/// user chooses, so they hash with a per-process key.
#[derive(Debug, Clone)]
pub struct Local {
    /// Our requests sent through CPG and not yet applied, per resource.
    in_cpg: HashMap<u64, u32, KeyedNumbers>,
    /// Their sum.
    in_cpg_total: usize,
    /// Resources another node used lately, with when (ms).
    shared: HashMap<u64, u64, KeyedNumbers>,
    /// Owned resources our local decisions changed since their last STATE.
    pub dirty: std::collections::BTreeSet<u64>,
    /// Owned resources we gave back (RELEASE sent, not yet delivered).
    pub releasing: HashSet<u64, KeyedNumbers>,
    /// Our owned resources that hold nothing, with since when (ms).
    idle: HashMap<u64, u64, KeyedNumbers>,
}

impl Local {
    /// Empty records whose maps hash under `key`.
    pub fn new(key: u64) -> Self {
        let h = KeyedNumbers::new(key);
        Self {
            in_cpg: HashMap::with_hasher(h),
            in_cpg_total: 0,
            shared: HashMap::with_hasher(h),
            dirty: std::collections::BTreeSet::new(),
            releasing: HashSet::with_hasher(h),
            idle: HashMap::with_hasher(h),
        }
    }

    /// Hashes these records in a canonical order (not the maps' own) into `h`.
    pub fn fingerprint(&self, h: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        let sorted = |v: Vec<(u64, u64)>| {
            let mut v = v;
            v.sort_unstable();
            v
        };
        sorted(
            self.in_cpg
                .iter()
                .map(|(&n, &c)| (n, u64::from(c)))
                .collect(),
        )
        .hash(h);
        sorted(self.shared.iter().map(|(&n, &t)| (n, t)).collect()).hash(h);
        sorted(self.releasing.iter().map(|&n| (n, 0)).collect()).hash(h);
        sorted(self.idle.iter().map(|(&n, &t)| (n, t)).collect()).hash(h);
        self.dirty.hash(h);
    }

    /// Our owned resource `number` holds `holders` locks and waiters at `now_ms`.
    pub fn holding(&mut self, number: u64, holders: usize, now_ms: u64) {
        if holders == 0 {
            self.idle.entry(number).or_insert(now_ms);
        } else {
            self.idle.remove(&number);
        }
    }

    /// `number` is ours no more (given back, or disowned at a change).
    pub fn not_ours(&mut self, number: u64) {
        self.idle.remove(&number);
    }

    /// Forgets every idle resource (a change gives everything back).
    pub fn forget_idle(&mut self) {
        self.idle.clear();
    }

    /// Our owned resources that have held nothing for `idle_ms` at `now_ms`, in number
    /// order (at most [`OWNED_MAX`]: one walk a second).
    pub fn idle_since(&self, now_ms: u64, idle_ms: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .idle
            .iter()
            .filter(|&(_, &t)| now_ms.saturating_sub(t) >= idle_ms)
            .map(|(&n, _)| n)
            .collect();
        v.sort_unstable();
        v
    }

    /// One of ours for `number` went to CPG.
    pub fn sent(&mut self, number: u64) {
        *self.in_cpg.entry(number).or_default() += 1;
        self.in_cpg_total += 1;
    }

    /// One of ours for `number` was applied.
    pub fn applied(&mut self, number: u64) {
        if let Some(n) = self.in_cpg.get_mut(&number) {
            *n -= 1;
            self.in_cpg_total -= 1;
            if *n == 0 {
                self.in_cpg.remove(&number);
            }
        }
    }

    /// Requests of ours for `number` still in CPG.
    pub fn in_cpg(&self, number: u64) -> bool {
        self.in_cpg.contains_key(&number)
    }

    /// Our requests in CPG, over every resource.
    pub fn in_cpg_total(&self) -> usize {
        self.in_cpg_total
    }

    /// Another node used `number` at `now_ms`.
    pub fn saw_shared(&mut self, number: u64, now_ms: u64) {
        if self.shared.len() >= SHARED_MAX && !self.shared.contains_key(&number) {
            self.shared
                .retain(|_, &mut t| now_ms.saturating_sub(t) < SHARED_MS);
            if self.shared.len() >= SHARED_MAX {
                self.shared.clear();
            }
        }
        self.shared.insert(number, now_ms);
    }

    /// Another node used `number` within the last second.
    pub fn shared(&self, number: u64, now_ms: u64) -> bool {
        self.shared
            .get(&number)
            .is_some_and(|&t| now_ms.saturating_sub(t) < SHARED_MS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlm_proto::kernel::{PlockFlags, PlockOp, PlockVersion};

    fn info(op: PlockOp, number: u64, wait: bool) -> PlockInfo {
        PlockInfo {
            version: PlockVersion([1, 2, 0]),
            op,
            ex: true,
            wait,
            flags: PlockFlags(0),
            pid: 1,
            nodeid: 1,
            rv: 0,
            fsid: 1,
            number,
            start: 0,
            end: 0,
            owner: 9,
        }
    }

    #[test]
    fn a_reply_ready_early_waits_behind_older_requests() {
        let mut o = ReplyOrder::default();
        let (a, b, c) = (
            info(PlockOp::GET, 1, false),
            info(PlockOp::LOCK, 2, true),
            info(PlockOp::UNLOCK, 3, false),
        );
        for i in [&a, &b, &c] {
            o.expect(i);
        }
        assert_eq!(o.len(), 2, "the blocking LOCK takes no place");
        let mut out = Vec::new();
        o.answered(c, |r| out.push(r.number));
        assert!(out.is_empty(), "3 waits behind 1");
        o.answered(b, |r| out.push(r.number));
        assert_eq!(out, [2], "a blocking reply goes at once");
        o.answered(a, |r| out.push(r.number));
        assert_eq!(out, [2, 1, 3]);
        assert!(o.is_empty());
    }

    #[test]
    fn a_local_answer_takes_the_last_place_and_waits_behind_older_ones() {
        let mut o = ReplyOrder::default();
        let (a, b) = (info(PlockOp::GET, 1, false), info(PlockOp::LOCK, 2, false));
        o.expect(&a);
        o.expect(&b);
        let mut out = Vec::new();
        o.answered_last(b, |r| out.push(r.number));
        assert!(out.is_empty(), "2 waits behind 1");
        o.answered(a, |r| out.push(r.number));
        assert_eq!(out, [1, 2]);
        // not the last one: found as any other
        o.expect(&a);
        o.expect(&b);
        o.answered_last(a, |r| out.push(r.number));
        assert_eq!(out, [1, 2, 1]);
        assert_eq!(o.len(), 1);
    }

    #[test]
    fn recalls_queue_in_order_and_leave_with_the_owner() {
        let mut w = Owners::default();
        w.grant(5, 2);
        w.grant(6, 2);
        assert_eq!((w.count(2), w.owner(5)), (2, Some(2)));
        let rules = Rules {
            claims: true,
            cancel: true,
            deadlock: false,
        };
        assert!(w.wait(5, (3, info(PlockOp::LOCK, 5, true), false, rules)));
        assert!(!w.wait(5, (4, info(PlockOp::GET, 5, false), false, rules)));
        assert!(w.recalling(5) && w.waiting() == 2);
        w.drop_requests_of(4);
        assert_eq!(w.waiting(), 1);
        let q = w.release(5);
        assert_eq!(q.iter().map(|x| x.0).collect::<Vec<_>>(), [3]);
        assert_eq!((w.owner(5), w.count(2), w.waiting()), (None, 1, 0));
        assert_eq!(w.owned_by(2), [6]);
        assert!(w.release(6).is_empty() && w.is_empty());
    }

    #[test]
    fn a_fresh_dump_waits_for_every_owner_then_for_nobody_else() {
        let mut f = Fresh::default();
        let id = f.ask(0).expect("the first asks");
        assert_eq!(f.ask(0), None, "a second dump joins the SYNC on its way");
        assert!(
            !f.answered(id, 2),
            "an answer before our SYNC is delivered counts for nothing"
        );
        assert!(!f.delivered(id + 1, [2].into_iter()), "not ours");
        assert!(!f.delivered(id, [2, 3].into_iter()));
        assert!(!f.answered(id + 1, 2) && !f.answered(id, 4));
        assert!(!f.answered(id, 2));
        assert!(f.answered(id, 3), "the last owner");
        assert!(!f.is_pending());
        // nobody owns anything: at once
        let id = f.ask(0).expect("asks again");
        assert!(f.delivered(id, std::iter::empty()));
        // an owner that never answers holds it a while, not for ever
        let id = f.ask(5000).expect("asks again");
        assert!(!f.delivered(id, [5].into_iter()));
        assert!(!f.poll(5000 + FRESH_WAIT_MS - 1));
        assert!(f.poll(5000 + FRESH_WAIT_MS) && !f.is_pending());
        assert!(!f.end(), "nothing waits");
        // a dump right after the last SYNC uses it; a later one asks again
        let id = f.ask(9000).expect("asks again");
        assert!(!f.recent(9050), "still on its way");
        assert!(f.delivered(id, std::iter::empty()));
        assert!(f.recent(9000 + FRESH_REUSE_MS - 1));
        assert!(!f.recent(9000 + FRESH_REUSE_MS));
    }

    #[test]
    fn shared_resources_are_forgotten_after_a_while_and_bounded() {
        let mut l = Local::new(5);
        l.saw_shared(1, 100);
        assert!(l.shared(1, 100 + SHARED_MS - 1));
        assert!(!l.shared(1, 100 + SHARED_MS));
        for n in 0..(SHARED_MAX as u64 * 3) {
            l.saw_shared(n, 5000);
        }
        assert!(l.shared.len() <= SHARED_MAX);
        l.sent(7);
        l.sent(7);
        l.applied(7);
        assert!(l.in_cpg(7));
        assert_eq!(l.in_cpg_total(), 1);
        l.applied(7);
        assert!(!l.in_cpg(7) && l.in_cpg_total() == 0);
    }
}
