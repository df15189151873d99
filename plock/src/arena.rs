//! An arena of range entries, each in two intrusive structures at once:
//!
//! * an interval treap keyed by `(start, seq)` and augmented with the subtree's largest
//!   `end`, so "every entry overlapping `[s, e]`" costs O(log n + k);
//! * a doubly linked list in insertion order, which is the C daemon's list order (dumps,
//!   state transfer and GET's "first conflicting fragment" depend on it).
//!
//! A list of at most [`SMALL`] entries keeps no treap: a walk of its list answers a query
//! for less than the treap's splits and merges cost at that size (a file that 16 processes
//! lock in disjoint ranges: docs/BENCHMARKS.md, "Settings chosen by measurement"). It builds
//! its treap when it grows past [`SMALL`] and drops it when it shrinks to [`SMALL_AGAIN`],
//! so no sequence of requests makes it build and drop at every one; a treap's shape depends
//! on its keys and priorities only, so a list's treap is the same whenever it was built.
//!
//! One arena serves every resource of a lockspace; a resource owns only a small
//! [`ListHead`] (root, head, tail, length, sequence counter), so a resource with one lock
//! costs one arena slot and no allocation of its own. Slots are reused through a free list.
//!
//! Why not the `slab` and `intrusive-collections` crates: `slab::Slab<T>` stores an
//! `enum { Vacant(usize), Occupied(T) }` per entry and hands out `usize` keys, while here the
//! links between entries are the index itself — four `u32` links (treap left/right, list
//! prev/next) cost 16 bytes where `usize` keys would cost 32, and a free slot needs no link
//! of its own (a side `Vec` of free slots); intrusive-collections links nodes with pointers (8 bytes each) into
//! separately allocated, pinned nodes, one allocation per lock and `unsafe` adapters. At 10⁶
//! locks the difference is the 100-byte budget (docs/BENCHMARKS.md).
//!
//! Design: treap priorities are a keyed bijective hash of the slot number, keyed by a seed the
//! caller passes in (the daemon draws one per process). They only shape the tree, never a
//! decision, so replicas with different seeds stay one state machine while a user who picks
//! the order of their ranges cannot pick a degenerate tree: the expected depth is O(log n)
//! whatever the input. No walk recurses: split, merge and the overlap walk are loops with
//! explicit paths, so no input reaches the stack's limit. Positions in insertion order are `u32`
//! (a node is 72 bytes with a 24-byte value); when a list has used them all it renumbers
//! itself 0.. in order, which keeps every comparison and the treap's order (keys with equal
//! `start` keep their relative order), once per 2³² insertions into one list.

/// Index of an arena slot.
pub(crate) type Slot = u32;
const NIL: Slot = u32::MAX;

/// A list of at most this many entries keeps no treap (see the module's comment).
pub(crate) const SMALL: u32 = 32;
/// A list with a treap drops it when it shrinks to this many entries.
pub(crate) const SMALL_AGAIN: u32 = 16;

#[derive(Debug, Clone)]
struct Node<T> {
    start: u64,
    end: u64,
    max_end: u64,
    seq: u32,
    left: Slot,
    right: Slot,
    prev: Slot,
    next: Slot,
    value: Option<T>,
}

/// The per-resource handle of one indexed list in an [`Arena`]. `root` is `NIL` while the
/// list keeps no treap (empty, or small: see the module's comment).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListHead {
    root: Slot,
    head: Slot,
    tail: Slot,
    len: u32,
    next_seq: u32,
}

impl Default for ListHead {
    fn default() -> Self {
        Self {
            root: NIL,
            head: NIL,
            tail: NIL,
            len: 0,
            next_seq: 0,
        }
    }
}

impl ListHead {
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the list keeps a treap now (not while small: see the module's comment).
    pub(crate) fn has_treap(&self) -> bool {
        self.root != NIL
    }

    /// The first entry in insertion order (NIL when empty).
    pub(crate) fn head(&self) -> Slot {
        self.head
    }

    /// The next insertion renumbers the list (its positions are used up).
    pub(crate) fn will_renumber(&self) -> bool {
        self.next_seq == u32::MAX
    }

    /// Moves the next position close to the end, so a test reaches a renumbering.
    #[cfg(test)]
    pub(crate) fn exhaust_positions(&mut self, left: u32) {
        self.next_seq = self.next_seq.max(u32::MAX - left);
    }
}

/// Slab of nodes shared by many lists.
#[derive(Debug, Clone)]
pub(crate) struct Arena<T> {
    nodes: Vec<Node<T>>,
    free: Vec<Slot>,
    /// Keys the treap priorities.
    seed: u64,
    /// The nodes a split or merge passed, re-augmented bottom-up after it (kept to reuse).
    path: Vec<Slot>,
}

/// splitmix64's finaliser: a bijection of `u64`, so distinct inputs never tie.
pub(crate) fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Where a subtree hangs: the root of the tree being built, or a child link of a node.
#[derive(Clone, Copy)]
enum Hook {
    Root,
    Left(Slot),
    Right(Slot),
}

/// The explicit stack of the overlap walk: 64 entries inline (a treap with random
/// priorities is that deep with negligible probability), spilling to the heap beyond, so
/// the walk neither recurses nor allocates in practice.
struct WalkStack {
    inline: [Slot; 64],
    len: usize,
    spill: Vec<Slot>,
}

impl WalkStack {
    fn new() -> Self {
        Self {
            inline: [NIL; 64],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn push(&mut self, s: Slot) {
        if self.len < self.inline.len() {
            self.inline[self.len] = s;
            self.len += 1;
        } else {
            self.spill.push(s);
        }
    }

    fn pop(&mut self) -> Option<Slot> {
        if let Some(s) = self.spill.pop() {
            return Some(s);
        }
        self.len = self.len.checked_sub(1)?;
        Some(self.inline[self.len])
    }
}

impl<T> Arena<T> {
    /// An empty arena whose treap priorities are keyed by `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            nodes: Vec::new(),
            free: Vec::new(),
            seed,
            path: Vec::new(),
        }
    }

    fn priority(&self, s: Slot) -> u64 {
        mix64(u64::from(s) ^ self.seed)
    }

    fn node(&self, s: Slot) -> &Node<T> {
        &self.nodes[s as usize]
    }

    fn node_mut(&mut self, s: Slot) -> &mut Node<T> {
        &mut self.nodes[s as usize]
    }

    /// Every live value, in slot order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.nodes.iter().filter_map(|n| n.value.as_ref())
    }

    /// Slots in use.
    pub(crate) fn live(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Bytes of the slab itself (capacity), for memory accounting.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * size_of::<Node<T>>() + self.free.capacity() * size_of::<Slot>()
    }

    pub(crate) fn get(&self, s: Slot) -> &T {
        self.node(s)
            .value
            .as_ref()
            .expect("slot handed out by this arena is live")
    }

    /// The value in `s`, if the slot is live.
    pub(crate) fn try_get(&self, s: Slot) -> Option<&T> {
        self.nodes.get(s as usize)?.value.as_ref()
    }

    pub(crate) fn get_mut(&mut self, s: Slot) -> &mut T {
        self.node_mut(s)
            .value
            .as_mut()
            .expect("slot handed out by this arena is live")
    }

    pub(crate) fn range(&self, s: Slot) -> (u64, u64) {
        let n = self.node(s);
        (n.start, n.end)
    }

    /// The entry after `s` in its list's insertion order (NIL at the tail).
    pub(crate) fn next(&self, s: Slot) -> Slot {
        self.node(s).next
    }

    /// Position in insertion order, comparable within one list.
    pub(crate) fn seq(&self, s: Slot) -> u32 {
        self.node(s).seq
    }

    fn key(&self, s: Slot) -> (u64, u32) {
        let n = self.node(s);
        (n.start, n.seq)
    }

    /// Gives the entries of `list` the positions 0.. in insertion order (an order-keeping
    /// relabelling, so the treap stays valid).
    fn renumber(&mut self, list: &mut ListHead) {
        let mut s = list.head;
        let mut seq = 0u32;
        while s != NIL {
            let n = self.node_mut(s);
            n.seq = seq;
            seq += 1;
            s = n.next;
        }
        list.next_seq = seq;
    }

    fn fix(&mut self, s: Slot) {
        let (l, r, end) = {
            let n = self.node(s);
            (n.left, n.right, n.end)
        };
        let mut m = end;
        if l != NIL {
            m = m.max(self.node(l).max_end);
        }
        if r != NIL {
            m = m.max(self.node(r).max_end);
        }
        self.node_mut(s).max_end = m;
    }

    /// Hangs `s` at `hook` of the tree whose root is `root`.
    fn attach(&mut self, root: &mut Slot, hook: Hook, s: Slot) {
        match hook {
            Hook::Root => *root = s,
            Hook::Left(p) => self.node_mut(p).left = s,
            Hook::Right(p) => self.node_mut(p).right = s,
        }
    }

    /// Re-augments the nodes of `self.path`, deepest (last visited) first.
    fn fix_path(&mut self) {
        let path = std::mem::take(&mut self.path);
        for &s in path.iter().rev() {
            self.fix(s);
        }
        self.path = path;
    }

    /// Splits `t` into keys < `key` and keys ≥ `key`; a loop down one path.
    fn split(&mut self, mut t: Slot, key: (u64, u32)) -> (Slot, Slot) {
        let (mut below, mut above) = (NIL, NIL);
        let (mut low, mut high) = (Hook::Root, Hook::Root);
        self.path.clear();
        while t != NIL {
            self.path.push(t);
            if self.key(t) < key {
                self.attach(&mut below, low, t);
                low = Hook::Right(t);
                t = self.node(t).right;
            } else {
                self.attach(&mut above, high, t);
                high = Hook::Left(t);
                t = self.node(t).left;
            }
        }
        self.attach(&mut below, low, NIL);
        self.attach(&mut above, high, NIL);
        self.fix_path();
        (below, above)
    }

    /// Merges two treaps where every key of `a` is below every key of `b`; a loop down
    /// `a`'s right spine and `b`'s left spine.
    fn merge(&mut self, mut a: Slot, mut b: Slot) -> Slot {
        let mut root = NIL;
        let mut hook = Hook::Root;
        self.path.clear();
        loop {
            if a == NIL || b == NIL {
                let rest = if a == NIL { b } else { a };
                self.attach(&mut root, hook, rest);
                break;
            }
            if self.priority(a) > self.priority(b) {
                self.attach(&mut root, hook, a);
                self.path.push(a);
                hook = Hook::Right(a);
                a = self.node(a).right;
            } else {
                self.attach(&mut root, hook, b);
                self.path.push(b);
                hook = Hook::Left(b);
                b = self.node(b).left;
            }
        }
        self.fix_path();
        root
    }

    fn tree_insert(&mut self, list: &mut ListHead, s: Slot) {
        let key = self.key(s);
        let (a, b) = self.split(list.root, key);
        let left = self.merge(a, s);
        list.root = self.merge(left, b);
    }

    fn tree_remove(&mut self, list: &mut ListHead, s: Slot) {
        let (start, seq) = self.key(s);
        let (a, b) = self.split(list.root, (start, seq));
        // keys are (start, seq), unique; positions stop below u32::MAX (a list renumbers
        // before handing that one out), so (start, seq + 1) is the first key above it
        let above = (start, seq + 1);
        let (m, c) = self.split(b, above);
        debug_assert_eq!(m, s, "treap lost an entry");
        let n = self.node_mut(s);
        n.left = NIL;
        n.right = NIL;
        n.max_end = n.end;
        list.root = self.merge(a, c);
    }

    /// Appends `value` for `[start, end]` at the tail of `list`.
    pub(crate) fn push_back(
        &mut self,
        list: &mut ListHead,
        start: u64,
        end: u64,
        value: T,
    ) -> Slot {
        if list.will_renumber() {
            self.renumber(list);
        }
        let seq = list.next_seq;
        list.next_seq += 1;
        let node = Node {
            start,
            end,
            max_end: end,
            seq,
            left: NIL,
            right: NIL,
            prev: list.tail,
            next: NIL,
            value: Some(value),
        };
        let s = if let Some(s) = self.free.pop() {
            self.nodes[s as usize] = node;
            s
        } else {
            let s = Slot::try_from(self.nodes.len()).expect("fewer than 2^32 entries");
            self.nodes.push(node);
            s
        };
        if list.tail == NIL {
            list.head = s;
        } else {
            let t = list.tail;
            self.node_mut(t).next = s;
        }
        list.tail = s;
        list.len += 1;
        if list.has_treap() {
            self.tree_insert(list, s);
        } else if list.len > SMALL {
            self.build_tree(list);
        }
        s
    }

    /// Gives a small list that grew past [`SMALL`] its treap (each node is a leaf: see
    /// [`Self::drop_tree`]).
    fn build_tree(&mut self, list: &mut ListHead) {
        let mut s = list.head;
        while s != NIL {
            self.tree_insert(list, s);
            s = self.node(s).next;
        }
    }

    /// Drops the treap of a list that shrank to [`SMALL_AGAIN`]: every node a leaf again.
    fn drop_tree(&mut self, list: &mut ListHead) {
        let mut s = list.head;
        while s != NIL {
            let n = self.node_mut(s);
            n.left = NIL;
            n.right = NIL;
            n.max_end = n.end;
            s = n.next;
        }
        list.root = NIL;
    }

    /// Unlinks `s` from `list` and frees its slot.
    pub(crate) fn remove(&mut self, list: &mut ListHead, s: Slot) -> T {
        if list.has_treap() {
            self.tree_remove(list, s);
        }
        let (prev, next) = {
            let n = self.node(s);
            (n.prev, n.next)
        };
        if prev == NIL {
            list.head = next;
        } else {
            self.node_mut(prev).next = next;
        }
        if next == NIL {
            list.tail = prev;
        } else {
            self.node_mut(next).prev = prev;
        }
        list.len -= 1;
        if list.has_treap() && list.len <= SMALL_AGAIN {
            self.drop_tree(list);
        }
        self.free.push(s);
        self.node_mut(s)
            .value
            .take()
            .expect("slot handed out by this arena is live")
    }

    /// Changes the range of `s`, keeping its place in insertion order.
    pub(crate) fn set_range(&mut self, list: &mut ListHead, s: Slot, start: u64, end: u64) {
        let treap = list.has_treap();
        if treap {
            self.tree_remove(list, s);
        }
        let n = self.node_mut(s);
        n.start = start;
        n.end = end;
        n.max_end = end;
        if treap {
            self.tree_insert(list, s);
        }
    }

    /// Pushes onto `out`, in key order, every slot of `list` overlapping `[start, end]`.
    /// With a treap, an in-order walk on an explicit stack that skips subtrees whose
    /// `max_end` is below `start` and stops at the first key past `end` (every later key
    /// starts after it); without one, [`Self::overlapping_small`].
    pub(crate) fn overlapping(&self, list: &ListHead, start: u64, end: u64, out: &mut Vec<Slot>) {
        if !list.has_treap() {
            return self.overlapping_small(list, start, end, out);
        }
        let mut stack = WalkStack::new();
        let mut t = list.root;
        loop {
            while t != NIL && self.node(t).max_end >= start {
                stack.push(t);
                t = self.node(t).left;
            }
            let Some(s) = stack.pop() else {
                return;
            };
            let n = self.node(s);
            if n.start > end {
                return;
            }
            if n.end >= start {
                out.push(s);
            }
            t = n.right;
        }
    }

    /// [`Self::overlapping`] of a list without a treap: a walk of the list (insertion
    /// order, so positions ascend), then those found put in key order by an insertion sort
    /// on their starts that keeps equal starts in list order (at most [`SMALL`] of them; no
    /// allocation).
    fn overlapping_small(&self, list: &ListHead, start: u64, end: u64, out: &mut Vec<Slot>) {
        let first = out.len();
        let mut s = list.head;
        while s != NIL {
            let n = self.node(s);
            if n.start <= end && n.end >= start {
                out.push(s);
            }
            s = n.next;
        }
        for i in first + 1..out.len() {
            let mut j = i;
            while j > first && self.node(out[j - 1]).start > self.node(out[j]).start {
                out.swap(j - 1, j);
                j -= 1;
            }
        }
    }

    /// The treap's depth (levels), for tests of its balance; breadth first, no recursion.
    #[cfg(test)]
    pub(crate) fn depth(&self, list: &ListHead) -> usize {
        let mut level = vec![list.root];
        let mut depth = 0;
        while level.iter().any(|&s| s != NIL) {
            depth += 1;
            level = level
                .iter()
                .filter(|&&s| s != NIL)
                .flat_map(|&s| [self.node(s).left, self.node(s).right])
                .collect();
        }
        depth
    }

    /// Slots of `list` in insertion order.
    pub(crate) fn iter<'a>(&'a self, list: &ListHead) -> impl Iterator<Item = Slot> + use<'a, T> {
        let mut s = list.head;
        std::iter::from_fn(move || {
            if s == NIL {
                return None;
            }
            let cur = s;
            s = self.node(cur).next;
            Some(cur)
        })
    }
}

/// Starts in the order of the treap priorities `seed` gives slots 0..n: inserting slot i
/// with start `starts[i]` sorts keys as priorities, so that seed builds a chain of depth n
/// (the attack of a user who knows the seed; tests only).
#[cfg(test)]
pub(crate) fn adversarial_starts(seed: u64, n: u32) -> Vec<u64> {
    let probe: Arena<()> = Arena::new(seed);
    let mut by_priority: Vec<u32> = (0..n).collect();
    by_priority.sort_unstable_by_key(|&s| probe.priority(s));
    let mut starts = vec![0; n as usize];
    for (rank, &s) in by_priority.iter().enumerate() {
        starts[s as usize] = 4 * u64::try_from(rank).unwrap_or(u64::MAX);
    }
    starts
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    /// Brute force against the arena on a small domain, many operations, the list growing
    /// to about 1,250 entries (past [`SMALL`] early: a treap most of the time).
    #[test]
    fn matches_brute_force() {
        let (treaps, _) = brute_force(12345, 5000, None);
        assert!(treaps > 4000, "{treaps}");
    }

    /// The same with the list kept between 8 and 48 entries: it builds its treap past
    /// [`SMALL`] and drops it at [`SMALL_AGAIN`] again and again, every answer as the brute
    /// force's, in key order.
    #[test]
    fn small_lists_build_and_drop_their_treap() {
        let (treaps, changes) = brute_force(777, 40_000, Some((8, 48)));
        assert!(treaps > 4000 && treaps < 36_000, "{treaps}");
        assert!(changes >= 20, "{changes}");
    }

    /// Runs `steps` random operations (pushes, removals, range changes; with `hover`, as many
    /// pushes as removals between its marks, pushes below the low one, removals above the
    /// high one) and a random query after each,
    /// checked against a brute force: the slots, their key order, the list's order and
    /// length. Returns after how many steps the list had a treap, and how many times it
    /// built or dropped one.
    fn brute_force(seed: u64, steps: u32, hover: Option<(usize, usize)>) -> (u32, u32) {
        let mut arena: Arena<u32> = Arena::new(0x5eed);
        let mut list = ListHead::default();
        let mut model: Vec<(Slot, u64, u64, u32)> = Vec::new();
        let mut x: u64 = seed;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut treaps, mut changes, mut had) = (0, 0, false);
        for i in 0..steps {
            // run out of positions now and then: the list renumbers itself
            if i % 700 == 0 {
                list.exhaust_positions(2);
            }
            // with `hover`, a walk as likely to push as to remove between the marks
            let op = match hover {
                Some((lo, _)) if model.len() < lo => 0,
                Some((_, hi)) if model.len() > hi => 2,
                Some(_) => [0, 2, 3][rnd(3) as usize],
                None => rnd(4),
            };
            match op {
                0 | 1 => {
                    let a = rnd(64);
                    let b = a + rnd(16);
                    let s = arena.push_back(&mut list, a, b, i);
                    model.push((s, a, b, i));
                }
                2 if !model.is_empty() => {
                    let k = rnd(model.len() as u64) as usize;
                    let (s, ..) = model.remove(k);
                    arena.remove(&mut list, s);
                }
                _ if !model.is_empty() => {
                    let k = rnd(model.len() as u64) as usize;
                    let a = rnd(64);
                    let b = a + rnd(16);
                    arena.set_range(&mut list, model[k].0, a, b);
                    model[k].1 = a;
                    model[k].2 = b;
                }
                _ => {}
            }
            let (qs, qe) = {
                let a = rnd(80);
                (a, a + rnd(20))
            };
            let mut got = Vec::new();
            arena.overlapping(&list, qs, qe, &mut got);
            let keys: Vec<(u64, u32)> = got.iter().map(|&s| arena.key(s)).collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "step {i}: {keys:?}");
            got.sort_unstable();
            let mut want: Vec<Slot> = model
                .iter()
                .filter(|(_, a, b, _)| !(*b < qs || *a > qe))
                .map(|m| m.0)
                .collect();
            want.sort_unstable();
            assert_eq!(got, want, "step {i}");
            let order: Vec<u32> = arena.iter(&list).map(|s| *arena.get(s)).collect();
            let want_order: Vec<u32> = model.iter().map(|m| m.3).collect();
            assert_eq!(order, want_order);
            assert_eq!(list.len(), model.len());
            let treap = list.has_treap();
            assert!(!treap || list.len() > SMALL_AGAIN as usize, "step {i}");
            assert!(treap || list.len() <= SMALL as usize, "step {i}");
            treaps += u32::from(treap);
            changes += u32::from(treap != had);
            had = treap;
        }
        (treaps, changes)
    }

    fn fill(arena: &mut Arena<u32>, list: &mut ListHead, order: &[u64]) {
        for (i, &start) in order.iter().enumerate() {
            arena.push_back(list, start, start + 1, i as u32);
        }
    }

    /// The attack of a user who knows the key: the order degenerates that seed's treap
    /// into a chain (so the order is truly adversarial), while under any other seed the
    /// same order stays O(log n) deep — the daemon's seed is random and nobody's to know.
    #[test]
    fn adversarial_order_is_shallow_under_another_seed() {
        const KNOWN: u64 = 0;
        let mut known = (Arena::new(KNOWN), ListHead::default());
        fill(
            &mut known.0,
            &mut known.1,
            &adversarial_starts(KNOWN, 2_000),
        );
        assert_eq!(known.0.depth(&known.1), 2_000);

        let order = adversarial_starts(KNOWN, 30_000);
        for seed in [1, 0xdead_beef, u64::MAX] {
            let (mut arena, mut list) = (Arena::new(seed), ListHead::default());
            fill(&mut arena, &mut list, &order);
            let depth = arena.depth(&list);
            assert!(
                depth < 100,
                "seed {seed:#x}: depth {depth} for 30000 entries"
            );
        }
    }

    /// Nothing walks the tree by recursion: a chain 3,000 deep (the known-seed attack) is
    /// built, queried, moved and emptied on a thread with a 64 KiB stack.
    #[test]
    fn a_chain_needs_no_stack() {
        let run = || {
            let order = adversarial_starts(7, 3_000);
            let (mut arena, mut list) = (Arena::new(7), ListHead::default());
            fill(&mut arena, &mut list, &order);
            assert_eq!(arena.depth(&list), 3_000);
            let mut got = Vec::new();
            arena.overlapping(&list, 0, u64::MAX, &mut got);
            assert_eq!(got.len(), 3_000);
            let first = list.head();
            arena.set_range(&mut list, first, 1, 2);
            got.clear();
            arena.overlapping(&list, 2, 2, &mut got);
            assert!(got.contains(&first));
            let slots: Vec<Slot> = arena.iter(&list).collect();
            for s in slots {
                arena.remove(&mut list, s);
            }
            assert!(list.is_empty());
        };
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(run)
            .expect("spawn")
            .join()
            .expect("no stack overflow");
    }
}
