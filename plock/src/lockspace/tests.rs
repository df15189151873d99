//! Unit tests of the table: renumbering, a continuation into the inline form, slot sizes.
#![allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]

use super::*;

/// A request of `node` with `op` on one of 4 inodes, 3 owners, bytes 0..18 (a CLOSE when
/// `close`).
fn random_request(
    rnd: &mut dyn FnMut(u64) -> u64,
    node: u32,
    op: PlockOp,
    close: bool,
) -> PlockInfo {
    let start = rnd(12);
    PlockInfo {
        version: PLOCK_VERSION,
        op,
        ex: rnd(2) == 0,
        wait: rnd(2) == 0,
        flags: PlockFlags(u8::from(close)),
        pid: 100 + rnd(3) as u32,
        nodeid: node as i32,
        rv: 0,
        fsid: 7,
        number: rnd(4),
        start,
        end: start + rnd(6),
        owner: rnd(3),
    }
}

/// A seeded xorshift: `rnd(n)` is in `0..n`.
fn xorshift(mut x: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    }
}

/// Running out of 32-bit positions (creation order of resources, insertion order of a
/// resource's locks and waiters) renumbers them and changes no decision: a table pushed
/// to the last positions every few steps answers, dumps and digests exactly like one
/// that is not, through random locks, unlocks, waiters, GETs, CANCELs, CLOSEs and
/// purges from three nodes.
#[test]
fn renumbering_positions_changes_nothing() {
    let mut rnd = xorshift(0x9E37_79B9);
    let mut plain = Lockspace::new(1, 7, 1);
    let mut pushed = Lockspace::new(1, 7, 2);
    let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
    for step in 0..10_000u64 {
        if step % 37 == 0 {
            pushed.exhaust_creation_positions(2);
            pushed.exhaust_list_positions(2);
        }
        let node = 1 + rnd(3) as u32;
        if rnd(200) == 0 {
            plain.purge_node(step, node, &mut out_a);
            pushed.purge_node(step, node, &mut out_b);
        } else {
            let op = [
                PlockOp::LOCK,
                PlockOp::LOCK,
                PlockOp::UNLOCK,
                PlockOp::GET,
                PlockOp::CANCEL,
            ][rnd(5) as usize];
            let close = op == PlockOp::UNLOCK && rnd(8) == 0;
            let info = random_request(&mut rnd, node, op, close);
            plain.apply(step, node, &info, &mut out_a).expect("apply");
            pushed.apply(step, node, &info, &mut out_b).expect("apply");
        }
        assert_eq!(out_a, out_b, "step {step}");
        assert_eq!(plain.dump_text(), pushed.dump_text(), "step {step}");
        assert_eq!(plain.digest(), pushed.digest(), "step {step}");
    }
    assert!(plain.waiter_count() > 0 || !out_a.is_empty());
}

/// A continuation (RD_CONTINUE) for a resource whose first message carried one lock
/// (C's own streams fill the first message, a fuzzer's need not): the lock already held
/// inline and the new entries end up in one list, in message order. Found by the
/// `lscore` fuzz target.
#[test]
fn continuation_after_a_one_lock_message() {
    use dlm_proto::wire::{PlockData, RD_CONTINUE, ResourceData};
    let entry = |start: u64, nodeid: u32, waiter: bool| PlockData {
        start,
        end: start + 1,
        owner: u64::from(nodeid),
        pid: 9,
        nodeid,
        ex: true,
        waiter,
    };
    let mut ls = Lockspace::new(4, 7, 4);
    let rd = |flags| ResourceData {
        number: 5,
        owner: 0,
        flags,
    };
    ls.restore(0, rd(0), [entry(0, 1, false)]).expect("first");
    ls.restore(0, rd(RD_CONTINUE), [entry(10, 2, false), entry(0, 3, true)])
        .expect("continuation");
    assert_eq!(
        ls.dump_text(),
        "5 WR 0-1 nodeid 1 pid 9 owner 1 rown 0\n\
         5 WR 10-11 nodeid 2 pid 9 owner 2 rown 0\n\
         5 WR 0-1 nodeid 3 pid 9 owner 3 rown 0 WAITING\n"
    );
    assert_eq!((ls.lock_count(), ls.waiter_count()), (2, 1));
}

/// The forms stay as small as the memory target needs.
#[test]
fn slot_sizes() {
    assert_eq!(size_of::<Option<Resource>>(), 72);
    assert_eq!(size_of::<Lock>(), 24);
}

/// A user who knew a replica's seed could chain its range index: that replica still
/// answers on a 256 KiB stack (nothing recurses), and exactly as a replica with another
/// seed, whose index stays shallow.
#[test]
fn a_known_seed_costs_time_not_the_stack() {
    let run = || {
        const N: u32 = 3_000;
        const KNOWN: u64 = 11;
        // the lock arena's key, derived from the table's seed as `Lockspace::new` does
        let starts = crate::arena::adversarial_starts(mix64(KNOWN ^ 1), N);
        let mut known = Lockspace::new(1, 7, KNOWN);
        let mut other = Lockspace::new(1, 7, 12);
        let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
        let info = |op, owner: u64, start: u64, end: u64| PlockInfo {
            op,
            pid: owner as u32,
            ..lock_of(owner, true, false, start, end)
        };
        let both = |a: &mut Lockspace,
                    b: &mut Lockspace,
                    i: &PlockInfo,
                    oa: &mut Vec<_>,
                    ob: &mut Vec<_>| {
            a.apply(0, 1, i, oa).expect("apply");
            b.apply(0, 1, i, ob).expect("apply");
        };
        for (k, &s) in starts.iter().enumerate() {
            let i = info(PlockOp::LOCK, k as u64, s, s + 1);
            both(&mut known, &mut other, &i, &mut out_a, &mut out_b);
        }
        assert!(
            known.lock_depth(5) > N as usize / 2,
            "the order chains the known seed"
        );
        assert!(other.lock_depth(5) < 100, "depth {}", other.lock_depth(5));
        let get = info(PlockOp::GET, 99_999, 0, u64::MAX);
        both(&mut known, &mut other, &get, &mut out_a, &mut out_b);
        assert_eq!(known.dump_text(), other.dump_text());
        for (k, &s) in starts.iter().enumerate().step_by(2) {
            let i = info(PlockOp::UNLOCK, k as u64, s, s + 1);
            both(&mut known, &mut other, &i, &mut out_a, &mut out_b);
        }
        assert_eq!(out_a, out_b);
        assert_eq!(known.digest(), other.digest());
        assert_eq!(known.lock_count(), N as usize / 2);
    };
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(run)
        .expect("spawn")
        .join()
        .expect("no stack overflow");
}

/// Node 1's `op` on resource `number` (fsid 7) by `owner`, on its own range
/// `owner*10 ..= owner*10+5`, exclusive and not waiting.
fn owners_range(number: u64, owner: u64, op: PlockOp) -> PlockInfo {
    PlockInfo {
        version: PLOCK_VERSION,
        op,
        ex: true,
        wait: false,
        flags: PlockFlags(0),
        pid: 1,
        nodeid: 1,
        rv: 0,
        fsid: 7,
        number,
        start: owner * 10,
        end: owner * 10 + 5,
        owner,
    }
}

/// A dump taken in portions (the daemon's way): resource by resource from the plan made at
/// its start, it equals the one-pass dump of an unchanged table; a resource gone meanwhile
/// is skipped, one created meanwhile is not in it, and the others show as they are then.
#[test]
fn a_dump_in_portions_follows_its_plan() {
    let mut ls = Lockspace::new(1, 7, 9);
    let mut out = Vec::new();
    let lock = owners_range;
    for number in [30, 10, 20] {
        for owner in 1..=2 {
            ls.apply(0, 1, &lock(number, owner, PlockOp::LOCK), &mut out)
                .expect("lock");
        }
    }
    let plan = ls.resource_numbers();
    assert_eq!(plan, [30, 10, 20], "creation order");
    let portions: String = plan
        .iter()
        .flat_map(|&n| ls.dump_of(n, 0))
        .map(|e| e.to_string())
        .collect();
    assert_eq!(portions, ls.dump_text());

    // between portions: 10 goes, 40 comes, 20 gains a lock
    let first: String = ls.dump_of(plan[0], 0).map(|e| e.to_string()).collect();
    for owner in 1..=2 {
        ls.apply(0, 1, &lock(10, owner, PlockOp::UNLOCK), &mut out)
            .expect("unlock");
    }
    ls.apply(0, 1, &lock(40, 1, PlockOp::LOCK), &mut out)
        .expect("lock");
    ls.apply(0, 1, &lock(20, 3, PlockOp::LOCK), &mut out)
        .expect("lock");
    let rest: String = plan[1..]
        .iter()
        .flat_map(|&n| ls.dump_of(n, 0))
        .map(|e| e.to_string())
        .collect();
    assert!(first.lines().all(|l| l.starts_with("30 ")) && first.lines().count() == 2);
    assert_eq!(rest.lines().count(), 3, "{rest}");
    assert!(rest.lines().all(|l| l.starts_with("20 ")), "{rest}");
}

/// `order_by_number`: the list (one-lock and general resources alike) is relinked in number
/// order, with every lock kept; resources created later go to its tail, and a resource
/// freed anywhere in it (head, middle, tail) leaves the others linked.
#[test]
fn ordering_by_number_relinks_the_list() {
    let mut ls = Lockspace::new(1, 7, 9);
    let mut out = Vec::new();
    // 30 and 20 hold two locks, 50 and 10 one (the inline form)
    for (number, owners) in [(30, 2), (50, 1), (20, 2), (10, 1)] {
        for owner in 1..=owners {
            ls.apply(0, 1, &owners_range(number, owner, PlockOp::LOCK), &mut out)
                .expect("lock");
        }
    }
    let before = ls.digest();
    let mut lines: Vec<String> = ls.dump_text().lines().map(str::to_owned).collect();
    ls.order_by_number();
    assert_eq!(ls.resource_numbers(), [10, 20, 30, 50]);
    assert_eq!(ls.digest(), before, "nothing but the order changed");
    let mut after: Vec<String> = ls.dump_text().lines().map(str::to_owned).collect();
    assert_ne!(lines, after, "the dump follows the new order");
    lines.sort();
    after.sort();
    assert_eq!(lines, after);
    ls.apply(0, 1, &owners_range(5, 1, PlockOp::LOCK), &mut out)
        .expect("lock");
    assert_eq!(ls.resource_numbers(), [10, 20, 30, 50, 5]);
    for number in [10, 30, 5] {
        ls.apply(0, 1, &owners_range(number, 1, PlockOp::UNLOCK), &mut out)
            .expect("unlock");
        if number == 30 {
            ls.apply(0, 1, &owners_range(number, 2, PlockOp::UNLOCK), &mut out)
                .expect("unlock");
        }
    }
    assert_eq!(ls.resource_numbers(), [20, 50]);
    ls.apply(0, 1, &owners_range(1, 1, PlockOp::LOCK), &mut out)
        .expect("lock");
    ls.order_by_number();
    assert_eq!(ls.resource_numbers(), [1, 20, 50]);
}

/// `holders`: a resource with none, one node's locks and waiters, another node's waiter.
#[test]
fn holders_counts_every_lock_and_waiter() {
    let mut t = Lockspace::new(1, 7, 3);
    let req = |node: i32, start: u64, wait: bool| PlockInfo {
        version: PLOCK_VERSION,
        op: PlockOp::LOCK,
        ex: true,
        wait,
        flags: PlockFlags(0),
        pid: 10,
        nodeid: node,
        rv: 0,
        fsid: 7,
        number: 5,
        start,
        end: start,
        owner: u64::from(node.unsigned_abs()),
    };
    let mut out = Vec::new();
    assert_eq!(t.holders(5), (0, None));
    t.apply(0, 2, &req(2, 0, false), &mut out).expect("apply");
    assert_eq!(t.holders(5), (1, Some(2)), "one lock, inline");
    for s in 1..4 {
        t.apply(0, 2, &req(2, s, false), &mut out).expect("apply");
    }
    assert_eq!(t.holders(5), (4, Some(2)));
    t.apply(0, 3, &req(3, 1, true), &mut out).expect("apply");
    assert_eq!(t.waiter_count(), 1);
    assert_eq!(t.holders(5), (5, None), "node 3 waits there");
    let cancel = PlockInfo {
        op: PlockOp::CANCEL,
        ..req(3, 1, true)
    };
    t.apply(0, 3, &cancel, &mut out).expect("apply");
    assert_eq!(t.holders(5), (4, Some(2)), "node 3 gone again");
}

/// A resource's state taken from one replica and put into another (different seed,
/// different history) makes that replica decide exactly as the first: after replacing every
/// resource the two answer, dump and digest alike through random operations, waiters and
/// their next waiter pass included.
#[test]
fn a_replaced_resource_decides_like_its_source() {
    let mut rnd = xorshift(0x2545_F491);
    let random_op = |rnd: &mut dyn FnMut(u64) -> u64| {
        let node = 1 + rnd(2) as u32;
        let op = [PlockOp::LOCK, PlockOp::LOCK, PlockOp::UNLOCK, PlockOp::GET][rnd(4) as usize];
        (node, random_request(rnd, node, op, false))
    };
    for round in 0..200u64 {
        let mut a = Lockspace::new(1, 7, round);
        let mut b = Lockspace::new(1, 7, round + 1000);
        let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
        for _ in 0..rnd(60) {
            let (n, i) = random_op(&mut rnd);
            a.apply(0, n, &i, &mut out_a).expect("apply");
        }
        for _ in 0..rnd(60) {
            let (n, i) = random_op(&mut rnd);
            b.apply(0, n, &i, &mut out_b).expect("apply");
        }
        let mut state = Vec::new();
        for number in 0..4 {
            a.resource_state(0, number, &mut state);
            b.replace_resource(5, number, &state).expect("replace");
        }
        assert_eq!(a.digest(), b.digest(), "round {round}");
        assert_eq!(
            a.lock_count() + a.waiter_count(),
            b.lock_count() + b.waiter_count()
        );
        assert_eq!(a.our_lock_count(), b.our_lock_count(), "round {round}");
        for step in 0..100 {
            out_a.clear();
            out_b.clear();
            let (n, i) = random_op(&mut rnd);
            a.apply(1, n, &i, &mut out_a).expect("apply");
            b.apply(1, n, &i, &mut out_b).expect("apply");
            assert_eq!(out_a, out_b, "round {round} step {step}");
            assert_eq!(a.digest(), b.digest(), "round {round} step {step}");
            assert_eq!(a.our_lock_count(), b.our_lock_count());
        }
    }
}

/// A LOCK of `owner` on inode 5 from node 1.
fn lock_of(owner: u64, ex: bool, wait: bool, start: u64, end: u64) -> PlockInfo {
    PlockInfo {
        version: PLOCK_VERSION,
        op: PlockOp::LOCK,
        ex,
        wait,
        flags: PlockFlags(0),
        pid: 100 + owner as u32,
        nodeid: 1,
        rv: 0,
        fsid: 7,
        number: 5,
        start,
        end,
        owner,
    }
}

/// A pass meets waiter A (conflicting) before waiter B; B's grant downgrades B's own
/// lock, which frees A behind the pass's position: as C's one walk of the list, A is not
/// granted in that pass but at the next one (the next request on the file). Both ways a
/// pass runs: walking every waiter (all are candidates) and, with a bystander the release
/// does not reach, taking candidates from the heap.
#[test]
fn a_waiter_freed_behind_the_pass_waits_for_the_next_pass() {
    for bystander in [false, true] {
        for cancel in [false, true] {
            freed_behind_the_pass(bystander, cancel);
        }
    }
}

/// The scenario above; `bystander` adds a waiter the unlock does not reach, `cancel`
/// cancels A while it is a candidate left for the next pass (its slot then goes to a new
/// waiter, which must not be taken for A).
fn freed_behind_the_pass(bystander: bool, cancel: bool) {
    let mut ls = Lockspace::new(1, 7, 3);
    let mut out = Vec::new();
    let granted = |out: &[Reply], owner: u64| {
        out.iter()
            .any(|r| r.info.owner == owner && r.info.op == PlockOp::LOCK && r.info.rv == 0)
    };
    for l in [
        lock_of(1, true, false, 0, 4),
        lock_of(1, true, false, 6, 9),
        lock_of(3, true, false, 5, 5),
        lock_of(6, true, false, 50, 50),
    ] {
        ls.apply(1, 1, &l, &mut out).expect("apply");
    }
    out.clear();
    if bystander {
        // owner 5 waits on owner 6's byte, which the unlock below does not touch
        ls.apply(2, 1, &lock_of(5, true, true, 50, 50), &mut out)
            .expect("apply");
    }
    // A (owner 2) waits for B's byte, then B waits for X's (owner 1) range around it
    ls.apply(2, 1, &lock_of(2, false, true, 5, 5), &mut out)
        .expect("apply");
    ls.apply(3, 1, &lock_of(3, false, true, 0, 9), &mut out)
        .expect("apply");
    assert!(out.is_empty(), "all wait: {out:?}");
    let others = usize::from(bystander);
    assert_eq!(ls.waiter_count(), 2 + others);
    let unlock = PlockInfo {
        op: PlockOp::UNLOCK,
        wait: false,
        ..lock_of(1, true, false, 0, 9)
    };
    ls.apply(4, 1, &unlock, &mut out).expect("apply");
    assert!(granted(&out, 3), "B is granted in the pass: {out:?}");
    assert!(!granted(&out, 2), "A is behind the pass: {out:?}");
    assert_eq!(ls.waiter_count(), 1 + others);
    let mut state = Vec::new();
    ls.resource_state(0, 5, &mut state);
    let candidates = state.iter().filter(|h| h.candidate).count();
    assert_eq!(candidates, 1, "A is left a candidate: {state:?}");
    out.clear();
    if cancel {
        let a = PlockInfo {
            op: PlockOp::CANCEL,
            ..lock_of(2, false, true, 5, 5)
        };
        ls.apply(5, 1, &a, &mut out).expect("apply");
        assert_eq!(out.len(), 1, "the cancel's answer: {out:?}");
        assert_eq!(out[0].info.rv, 0, "A was waiting: {out:?}");
        // owner 7 waits on B's shared range, in the slot A had
        ls.apply(5, 1, &lock_of(7, true, true, 5, 5), &mut out)
            .expect("apply");
        ls.resource_state(0, 5, &mut state);
        assert!(
            state.iter().all(|h| !h.candidate),
            "no candidate: {state:?}"
        );
        out.clear();
    }
    ls.apply(6, 1, &lock_of(4, false, false, 20, 20), &mut out)
        .expect("apply");
    assert_eq!(granted(&out, 2), !cancel, "A at the next pass: {out:?}");
    assert!(!granted(&out, 5), "the bystander still waits: {out:?}");
    assert!(!granted(&out, 7), "owner 7 waits for B: {out:?}");
    assert_eq!(ls.waiter_count(), others + usize::from(cancel));
}

/// A grant in a pass that takes candidates from the heap downgrades a lock and so frees
/// every remaining waiter, ahead of the pass's position: they are examined in the same
/// pass (found by the model check: they once got no heap entry and waited for the next).
#[test]
fn a_grant_in_a_heap_pass_that_frees_every_waiter_ahead() {
    let mut ls = Lockspace::new(1, 7, 3);
    let mut out = Vec::new();
    for l in [
        lock_of(1, true, false, 11, 11),
        lock_of(3, true, false, 6, 6),
        // W1: owner 3 waits on owner 1's byte 11; W2: owner 4 on owner 3's byte 6
        lock_of(3, false, true, 6, 11),
        lock_of(4, false, true, 5, 6),
    ] {
        ls.apply(1, 1, &l, &mut out).expect("apply");
    }
    assert_eq!(out.len(), 2, "two granted, two wait: {out:?}");
    assert_eq!(ls.waiter_count(), 2);
    out.clear();
    // owner 1 downgrades byte 11: only W1 is reached, so the pass uses the heap; W1's
    // grant downgrades owner 3's byte 6, which frees W2, the only waiter left
    ls.apply(2, 1, &lock_of(1, false, false, 8, 11), &mut out)
        .expect("apply");
    let owners: Vec<u64> = out.iter().map(|r| r.info.owner).collect();
    assert_eq!(
        owners,
        [1, 3, 4],
        "both waiters granted in the pass: {out:?}"
    );
    assert_eq!(ls.waiter_count(), 0);
}

/// Native mode's give-back: a purge may leave a resource's waiter pass to its owner
/// (`purge_node_but`), and `pass` runs it later; a state carries each entry's age.
#[test]
fn a_purge_can_leave_a_pass_for_the_give_back_and_states_keep_ages() {
    let mut ls = Lockspace::new(1, 7, 3);
    let mut out = Vec::new();
    let granted = |out: &[Reply], owner: u64| {
        out.iter()
            .any(|r| r.info.owner == owner && r.info.wait && r.info.rv == 0)
    };
    ls.apply(1000, 1, &lock_of(1, true, false, 0, 5), &mut out)
        .expect("apply");
    ls.apply(1000, 1, &lock_of(2, true, false, 6, 10), &mut out)
        .expect("apply");
    ls.apply(2000, 1, &lock_of(3, false, true, 0, 10), &mut out)
        .expect("apply");
    ls.apply(2000, 1, &lock_of(2, false, true, 4, 10), &mut out)
        .expect("apply");
    assert_eq!(ls.waiter_count_of(5), 2);
    out.clear();
    let unlock = PlockInfo {
        op: PlockOp::UNLOCK,
        ..lock_of(1, false, false, 0, 5)
    };
    ls.apply(3000, 1, &unlock, &mut out).expect("apply");
    assert!(
        granted(&out, 2) && !granted(&out, 3),
        "3 is behind the pass"
    );
    out.clear();
    // a node that holds nothing leaves: resource 5's pass is left to its owner
    ls.purge_node_but(4000, 9, |n| n == 5, &mut out);
    assert!(out.is_empty(), "no pass on 5: {out:?}");
    ls.pass(5000, 4, &mut out);
    assert!(out.is_empty(), "no such resource");
    ls.pass(5000, 5, &mut out);
    assert!(granted(&out, 3), "the give-back's pass grants 3: {out:?}");
    assert_eq!(ls.waiter_count_of(5), 0);
    out.clear();
    ls.pass(5000, 5, &mut out);
    assert!(out.is_empty(), "no candidate left");
    // the ages a state carries are those of the source, on any other replica
    ls.apply(6000, 1, &lock_of(4, true, true, 4, 4), &mut out)
        .expect("apply");
    let mut state = Vec::new();
    ls.resource_state(9000, 5, &mut state);
    let mut other = Lockspace::new(2, 7, 4);
    other.replace_resource(100_000, 5, &state).expect("replace");
    let ages = |t: &Lockspace, now| -> Vec<u64> { t.dump_of(5, now).map(|e| e.age_ms).collect() };
    assert_eq!(ages(&ls, 9000), ages(&other, 100_000));
    assert!(ages(&ls, 9000).contains(&3000), "the waiter's 3 s");
    assert_eq!(other.oldest_waiter_since(), Some(100_000 - 3000));
}
