//! Who blocks whom, from a lockspace's dump: each waiter's blockers (granted locks of
//! another owner that conflict with it), the chain of owners that wait on owners that wait,
//! and the cycles among them — a deadlock across nodes that no single node's kernel sees.
//! Owners are (node, owner) pairs, as the table compares them. Everything is a loop: no
//! input makes it recurse.

use std::collections::{BTreeMap, BTreeSet};

use crate::dump::DumpEntry;

/// A lock owner of the cluster: (node, owner).
pub type Owner = (i32, u64);

/// Blockers listed per waiter, at most (the count is kept).
pub const BLOCKERS_SHOWN: usize = 16;

/// Owners followed on one chain, at most (a ring of 10⁴ owners must not cost 10⁸ steps).
pub const CHAIN_MAX: usize = 64;

/// One waiter and what holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// The waiter's dump line.
    pub waiter: DumpEntry,
    /// Granted locks that conflict with it (at most [`BLOCKERS_SHOWN`]).
    pub blockers: Vec<DumpEntry>,
    /// How many there are in all.
    pub blocker_count: usize,
    /// Owners from the waiter's on: each waits for the next (its first blocker that waits
    /// itself, else its first blocker), to an owner that waits for nothing or one already
    /// on the chain (at most [`CHAIN_MAX`] owners: then `chain_cut`).
    pub chain: Vec<Owner>,
    /// The chain goes on beyond [`CHAIN_MAX`].
    pub chain_cut: bool,
    /// The waiter's owner is in a cycle of waiting owners.
    pub cycle: bool,
}

/// The whole picture of a lockspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waits {
    /// Every waiter, in dump order.
    pub waits: Vec<Wait>,
    /// The oldest wait (ms), 0 without waiters or ages.
    pub oldest_ms: u64,
    /// Owners on the longest chain.
    pub longest_chain: usize,
    /// Owners in a cycle of waiting owners.
    pub in_cycle: BTreeSet<Owner>,
}

fn owner_of(e: &DumpEntry) -> Owner {
    (e.nodeid, e.owner)
}

fn conflicts(w: &DumpEntry, g: &DumpEntry) -> bool {
    w.start <= g.end && g.start <= w.end && (w.ex || g.ex) && owner_of(w) != owner_of(g)
}

/// Who blocks whom among `entries` (a dump: granted locks and waiters of any resources).
pub fn waits(entries: &[DumpEntry]) -> Waits {
    let mut granted: BTreeMap<u64, Vec<&DumpEntry>> = BTreeMap::new();
    for e in entries.iter().filter(|e| !e.waiting) {
        granted.entry(e.number).or_default().push(e);
    }
    let mut out = Waits::default();
    // who each waiting owner waits for
    let mut graph: BTreeMap<Owner, BTreeSet<Owner>> = BTreeMap::new();
    for w in entries.iter().filter(|e| e.waiting) {
        let all: Vec<&DumpEntry> = granted
            .get(&w.number)
            .map(|g| g.iter().copied().filter(|g| conflicts(w, g)).collect())
            .unwrap_or_default();
        let edges = graph.entry(owner_of(w)).or_default();
        edges.extend(all.iter().map(|g| owner_of(g)));
        out.oldest_ms = out.oldest_ms.max(w.age_ms);
        out.waits.push(Wait {
            waiter: *w,
            blockers: all.iter().take(BLOCKERS_SHOWN).map(|g| **g).collect(),
            blocker_count: all.len(),
            chain: Vec::new(),
            chain_cut: false,
            cycle: false,
        });
    }
    out.in_cycle = cycles(&graph);
    for w in &mut out.waits {
        (w.chain, w.chain_cut) = chain(&graph, owner_of(&w.waiter));
        w.cycle = out.in_cycle.contains(&owner_of(&w.waiter));
        out.longest_chain = out.longest_chain.max(w.chain.len());
    }
    out
}

/// From `from`, each owner's next: the first it waits for that waits itself, else its
/// first; ends at an owner that waits for nothing or one seen before (or is cut).
fn chain(graph: &BTreeMap<Owner, BTreeSet<Owner>>, from: Owner) -> (Vec<Owner>, bool) {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut at = Some(from);
    while let Some(o) = at {
        if out.len() == CHAIN_MAX {
            return (out, true);
        }
        out.push(o);
        if !seen.insert(o) {
            break;
        }
        at = graph.get(&o).and_then(|next| {
            next.iter()
                .find(|n| graph.get(n).is_some_and(|s| !s.is_empty()))
                .or_else(|| next.iter().next())
                .copied()
        });
    }
    (out, false)
}

/// Owners in a strongly connected component of two or more (Tarjan's algorithm, with an
/// explicit stack).
fn cycles(graph: &BTreeMap<Owner, BTreeSet<Owner>>) -> BTreeSet<Owner> {
    let empty = BTreeSet::new();
    let succ = |o: &Owner| graph.get(o).unwrap_or(&empty);
    let mut index: BTreeMap<Owner, (usize, usize)> = BTreeMap::new(); // (index, lowlink)
    let mut on_stack = BTreeSet::new();
    let mut stack: Vec<Owner> = Vec::new();
    let mut out = BTreeSet::new();
    let mut next = 0;
    for &root in graph.keys() {
        if index.contains_key(&root) {
            continue;
        }
        // (owner, its successors not yet walked)
        let mut work: Vec<(Owner, Vec<Owner>)> = Vec::new();
        index.insert(root, (next, next));
        next += 1;
        stack.push(root);
        on_stack.insert(root);
        work.push((root, succ(&root).iter().rev().copied().collect()));
        while let Some((v, todo)) = work.last_mut() {
            let v = *v;
            if let Some(w) = todo.pop() {
                if let Some(&(wi, _)) = index.get(&w) {
                    if on_stack.contains(&w) {
                        let low = index.get(&v).map_or(wi, |x| x.1.min(wi));
                        index.entry(v).and_modify(|x| x.1 = low);
                    }
                } else {
                    index.insert(w, (next, next));
                    next += 1;
                    stack.push(w);
                    on_stack.insert(w);
                    work.push((w, succ(&w).iter().rev().copied().collect()));
                }
                continue;
            }
            work.pop();
            let (vi, vlow) = index.get(&v).copied().unwrap_or((0, 0));
            if let Some((parent, _)) = work.last() {
                let p = *parent;
                index.entry(p).and_modify(|x| x.1 = x.1.min(vlow));
            }
            if vlow == vi {
                let mut scc = Vec::new();
                while let Some(x) = stack.pop() {
                    on_stack.remove(&x);
                    scc.push(x);
                    if x == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    out.extend(scc);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(number: u64, range: (u64, u64), node: i32, owner: u64, waiting: bool) -> DumpEntry {
        DumpEntry {
            number,
            ex: true,
            start: range.0,
            end: range.1,
            nodeid: node,
            pid: u32::try_from(owner).unwrap_or(0),
            owner,
            waiting,
            age_ms: owner * 100,
        }
    }

    #[test]
    fn a_crosswise_pair_on_two_nodes_is_a_cycle() {
        // node 1 owner 10 holds inode 7, waits for inode 8; node 2 owner 20 the reverse
        let d = [
            e(7, (0, 0), 1, 10, false),
            e(8, (0, 0), 2, 20, false),
            e(8, (0, 0), 1, 10, true),
            e(7, (0, 0), 2, 20, true),
        ];
        let w = waits(&d);
        assert_eq!(w.waits.len(), 2);
        assert!(w.waits.iter().all(|x| x.cycle && x.blocker_count == 1));
        assert_eq!(w.in_cycle, BTreeSet::from([(1, 10), (2, 20)]));
        assert_eq!(w.waits[0].chain, vec![(1, 10), (2, 20), (1, 10)]);
        assert_eq!(w.oldest_ms, 2000);
    }

    #[test]
    fn a_chain_ends_at_the_owner_that_waits_for_nothing() {
        // 30 waits for 20 (range 5-9), 20 waits for 10 (inode 2); 10 waits for nothing
        let d = [
            e(1, (0, 9), 1, 20, false),
            e(2, (0, 0), 1, 10, false),
            e(1, (5, 5), 2, 30, true),
            e(2, (0, 0), 1, 20, true),
            // a disjoint range and a shared read do not block
            e(1, (50, 60), 3, 40, true),
        ];
        let mut rd = e(3, (0, 9), 1, 50, false);
        rd.ex = false;
        let mut rd2 = e(3, (0, 9), 2, 60, true);
        rd2.ex = false;
        let mut all = d.to_vec();
        all.extend([rd, rd2]);
        let w = waits(&all);
        assert_eq!(w.waits[0].chain, vec![(2, 30), (1, 20), (1, 10)]);
        assert!(w.in_cycle.is_empty());
        assert_eq!(w.longest_chain, 3);
        assert_eq!(w.waits[2].blocker_count, 0);
        assert_eq!(w.waits[3].blocker_count, 0, "two reads share");
    }

    #[test]
    fn a_long_ring_of_owners_is_one_cycle_without_recursion() {
        // owner i holds inode i and waits for inode i+1 (mod n): one cycle of n owners
        let n = 20_000u64;
        let mut d = Vec::new();
        for i in 0..n {
            d.push(e(i, (0, 0), 1, i + 1, false));
        }
        for i in 0..n {
            d.push(e((i + 1) % n, (0, 0), 1, i + 1, true));
        }
        let w = waits(&d);
        assert_eq!(w.in_cycle.len(), usize::try_from(n).expect("small"));
        assert_eq!(w.longest_chain, CHAIN_MAX);
        assert!(w.waits.iter().all(|x| x.chain_cut && x.cycle));
    }
}
