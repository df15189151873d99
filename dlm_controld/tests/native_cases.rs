//! Native mode's cases, each ordered by hand on the cluster simulation (the daemon's own
//! `LsCore` on the simulated bus): the defects issue 51 found, and the claim released while
//! a change starts. Each failed before its fix.

mod procs;
mod sim;

use std::collections::BTreeSet;

use dlm_proto::kernel::PlockOp;

use sim::{Sim, Watch, check_grants};

/// A claim released by its owner's START after the claimer's own START (docs/native-mode.md
/// "Membership changes"), every step ordered by hand (the bus orders at random among the
/// senders with messages pending; here one sender has them at each step). Nodes 1 and 2
/// are ours; node 2 claims inode 0 (and holds nothing there); node 1, not yet aware, asks
/// for it with a claim, which waits in node 2's recall; node 3 joins; node 1's START is
/// ordered before node 2's RELEASE and START, which then release node 1's claim while the
/// change starts. That claim grants nothing: after the change nobody owns anything, on
/// the old members as on the joiner, which has no owners (granted there, it made nodes 1
/// and 2 see node 1 own inode 0 where node 3 saw no owner: node 3 would apply its
/// requests for it at once, the others after node 1's recall). Then node 1 asks again:
/// beside one of ours its claim is granted on every node, beside a C joiner nowhere.
fn claim_across_a_join(joiner_is_c: bool) -> Sim {
    let plain = if joiner_is_c {
        BTreeSet::from([3])
    } else {
        BTreeSet::new()
    };
    let mut sim = Sim::new(1, 3, plain);
    for id in 1..=2 {
        sim.join(id);
        sim.settle();
    }
    // a lock claims the resource; its unlock, decided by node 2, leaves it holding nothing
    let theirs = sim.ask_now(2, PlockOp::LOCK, 0, 5);
    assert!(sim.bus.step());
    sim.node_turn(2);
    assert_eq!(sim.nodes[&2].core.owner_of(0), Some(2), "node 2 claimed it");
    let unlocked = sim.ask_now(2, PlockOp::UNLOCK, 0, 5);
    assert_eq!(
        sim.nodes[&2].procs.requests[&unlocked].rv,
        Some(0),
        "decided at once"
    );
    let ours = sim.ask_now(1, PlockOp::LOCK, 0, 6);
    assert!(sim.bus.step());
    sim.join(3);
    // node 1 applies node 2's claim and its own request (waiting in the recall), then the
    // confchg: its START alone is pending, and is ordered first
    sim.node_turn(1);
    assert!(sim.bus.step());
    sim.settle();
    sim.check_quiet();
    for (id, pid) in [(2, theirs), (1, ours)] {
        assert_eq!(
            sim.nodes[&id].procs.requests[&pid].rv,
            Some(0),
            "node {id}'s request"
        );
    }
    for n in sim.nodes.values() {
        assert_eq!(
            n.core.owner_of(0),
            None,
            "node {}: owned after the change",
            n.id
        );
        assert_eq!(n.core.is_native(), !joiner_is_c, "node {}", n.id);
    }
    // a second later node 2's use of it is forgotten: node 1 claims it again
    sim.clock += 2;
    let again = sim.ask_now(1, PlockOp::LOCK, 0, 7);
    sim.settle();
    sim.check_quiet();
    assert_eq!(sim.nodes[&1].procs.requests[&again].rv, Some(0));
    sim
}

#[test]
fn a_claim_released_while_a_change_starts_grants_nothing() {
    for n in claim_across_a_join(false).nodes.values() {
        assert_eq!(n.core.owner_of(0), Some(1), "node {}: claimed again", n.id);
    }
    for n in claim_across_a_join(true).nodes.values() {
        assert_eq!(n.core.owner_of(0), None, "node {}: beside a C member", n.id);
    }
}

/// Issue 51, item 1: a purge's waiter pass on a resource another node owns ran on the
/// owner's up-to-date copy and on the others' older copies alike; the owner granted a
/// waiter its STATE (sent before the purge) did not show as granted, so after the change
/// the replicas differed and another node was granted the same bytes.
#[test]
fn a_purge_leaves_an_owned_resource_to_its_owner() {
    let mut sim = Sim::new(1, 3, BTreeSet::new());
    sim.sync_every = None;
    for id in 1..=3 {
        sim.join(id);
        sim.settle();
    }
    let (lock, unlock) = (PlockOp::LOCK, PlockOp::UNLOCK);
    // node 1 claims inode 0 with owner 10's write lock of 0-5, then decides the rest
    let a = sim.ask(1, 0, lock, true, false, 0, (0, 5));
    sim.settle();
    assert_eq!(
        sim.nodes[&2].core.owner_of(0),
        Some(1),
        "node 1 owns inode 0"
    );
    let b = sim.ask(1, 1, lock, true, false, 0, (6, 10));
    let w12 = sim.ask(1, 2, lock, false, true, 0, (0, 10));
    let w11 = sim.ask(1, 1, lock, false, true, 0, (4, 10));
    let u = sim.ask(1, 0, unlock, false, false, 0, (0, 5));
    sim.settle();
    for p in [a, b, u, w11] {
        assert_eq!(sim.nodes[&1].procs.requests[&p].rv, Some(0), "request {p}");
    }
    assert_eq!(
        sim.nodes[&1].procs.requests[&w12].rv, None,
        "owner 12 left waiting"
    );
    assert!(
        sim.nodes[&1].core.native_stats().local >= 4,
        "decided on node 1"
    );
    sim.leave(3);
    sim.settle();
    assert!(sim.nodes[&3].core.is_left());
    sim.nodes.get_mut(&3).expect("node 3").group = None;
    sim.check_quiet();
    let c = sim.ask(2, 0, lock, true, false, 0, (0, 3));
    sim.settle();
    check_grants(&sim);
    let granted = sim.nodes[&2].procs.requests[&c].rv == Some(0);
    let holds = sim.nodes[&1].procs.requests[&w12].rv == Some(0);
    assert!(!(granted && holds), "both granted");
}

/// Issue 51, item 2: requests of the owner that crossed CPG grew its resource past what
/// one STATE carries; the next local decision's give-back could not be encoded and was
/// lost, and another node's request waited in the recall for ever.
#[test]
fn an_owned_resource_never_outgrows_its_state() {
    let mut sim = Sim::new(1, 2, BTreeSet::new());
    sim.sync_every = None;
    for id in 1..=2 {
        sim.join(id);
        sim.settle();
    }
    let lock = PlockOp::LOCK;
    // one process's 300 locks of distinct bytes, read before the first is delivered
    let mut mine = Vec::new();
    for byte in 0..300 {
        mine.push(sim.ask(1, 0, lock, true, false, 0, (2 * byte, 2 * byte)));
    }
    sim.settle();
    // the first claimed the file; the others, applied everywhere, took it past the
    // give-back threshold, and node 1 gave it back
    assert_eq!(sim.nodes[&2].core.owner_of(0), None, "given back");
    // another local decision, then another node's request
    mine.push(sim.ask(1, 0, lock, true, false, 0, (1000, 1000)));
    sim.settle();
    let theirs = sim.ask(2, 0, lock, true, false, 0, (1, 1));
    sim.settle();
    for p in &mine {
        assert_eq!(
            sim.nodes[&1].procs.requests[p].rv,
            Some(0),
            "node 1's request {p}"
        );
    }
    assert_eq!(
        sim.nodes[&2].procs.requests[&theirs].rv,
        Some(0),
        "node 2's request"
    );
    sim.check_quiet();
}

/// Issue 51, item 3: node 1 holds what it is delivered while it sends its table to a
/// joiner; node 2's claim of a fresh file, granted at once on the other members, is applied
/// on node 1 only after the joiner's death has interrupted the transfer — by the rules of
/// its own place in the total order (a started native change), not those of the change
/// that interrupted it. Applied by the new change's rules, the claim was refused on node 1,
/// node 2's STATE ignored there, and node 1's table lacked node 2's lock.
#[test]
fn a_claim_held_through_an_interrupted_transfer_stands() {
    let mut sim = Sim::new(1, 3, BTreeSet::new());
    sim.sync_every = None;
    for id in 1..=2 {
        sim.join(id);
        sim.settle();
    }
    let lock = PlockOp::LOCK;
    // a table that takes node 1 many turns to send
    for number in 0..200 {
        sim.ask(1, 0, lock, false, false, 10 + number, (0, 0));
    }
    sim.settle();
    sim.join(3);
    while !sim.nodes[&1].core.sending() {
        assert!(sim.settle_for(1), "the transfer begins");
    }
    let claim = sim.ask(2, 0, lock, true, false, 5, (0, 0));
    while sim.nodes[&2].core.owner_of(5) != Some(2) {
        assert!(sim.settle_for(1), "node 2's claim is delivered");
    }
    let local = sim.ask(2, 0, lock, true, false, 5, (1, 1));
    assert_eq!(
        sim.nodes[&2].procs.requests[&local].rv,
        Some(0),
        "decided on node 2"
    );
    sim.sync_node(2);
    while sim.queued(2) > 0 {
        assert!(sim.settle_for(1), "node 2's STATE is delivered");
    }
    sim.settle_for(1);
    assert!(sim.nodes[&1].core.sending(), "node 1 still sends its table");
    assert_eq!(sim.nodes[&2].procs.requests[&claim].rv, Some(0));
    let mut watch = Watch::default();
    sim.fail(3, 0, &mut watch);
    sim.fence_all(&mut watch);
    sim.sync_all();
    sim.drain_all();
    sim.check_quiet();
    check_grants(&sim);
}

/// Issue 51, item 4: a SYNC held across the change that brings a daemon of ours from before
/// SYNC is not answered in that change (its decoder would refuse the whole batch the SYNCED
/// is in, requests and all); the asker's dump goes ahead when the change starts.
#[test]
fn no_synced_reaches_a_member_from_before_sync() {
    let mut sim = Sim::new(1, 3, BTreeSet::new());
    sim.sync_every = None;
    sim.older.insert(3);
    for id in 1..=2 {
        sim.join(id);
        sim.settle();
    }
    let lock = PlockOp::LOCK;
    sim.ask(1, 0, lock, true, false, 0, (0, 0));
    sim.settle();
    let local = sim.ask(1, 0, lock, true, false, 0, (1, 1));
    assert_eq!(
        sim.nodes[&1].procs.requests[&local].rv,
        Some(0),
        "decided on node 1"
    );
    assert!(sim.want_fresh(2), "node 2's dump waits for node 1's STATE");
    sim.join(3);
    let seen = sim.nodes[&2].fresh;
    sim.settle();
    assert_eq!(sim.nodes[&2].fresh, seen + 1, "the dump went ahead");
    sim.drain_all();
    sim.check_quiet();
    // in the change with node 3 nobody sends a SYNC at all
    sim.ask(1, 0, lock, true, false, 1, (0, 0));
    sim.settle();
    assert!(!sim.want_fresh(2), "no SYNC beside node 3");
}

/// Issue 51, item 5: a STATE carries each lock's and waiter's age, so another node's table
/// shows how long it has been held, not how long since the last STATE.
#[test]
fn a_state_keeps_the_ages_of_what_it_carries() {
    let mut sim = Sim::new(1, 2, BTreeSet::new());
    sim.sync_every = None;
    for id in 1..=2 {
        sim.join(id);
        sim.settle();
    }
    let lock = PlockOp::LOCK;
    sim.ask(1, 0, lock, true, false, 0, (0, 0));
    sim.settle();
    sim.ask(1, 1, lock, true, false, 0, (1, 1));
    sim.ask(1, 2, lock, true, true, 0, (1, 1));
    sim.clock += 7;
    sim.sync_node(1);
    sim.settle();
    let now_ms = sim.clock * 1000;
    let ages: Vec<u64> = sim.nodes[&2]
        .core
        .plocks()
        .dump_of(0, now_ms)
        .map(|e| e.age_ms)
        .collect();
    assert_eq!(ages.len(), 3, "two locks and a waiter on node 2");
    assert!(ages.iter().all(|&a| a >= 7000), "ages on node 2: {ages:?}");
    let oldest = sim.nodes[&2].core.plocks().oldest_waiter_since();
    assert!(oldest <= Some(now_ms - 7000), "oldest waiter: {oldest:?}");
}

/// Issue 51, item 6: a GET or an UNLOCK of a file nobody uses claims nothing, and a claim
/// that has held nothing for a while is given back.
#[test]
fn claims_that_hold_nothing_go_back() {
    let mut sim = Sim::new(1, 2, BTreeSet::new());
    for id in 1..=2 {
        sim.join(id);
        sim.settle();
    }
    let (lock, unlock, get) = (PlockOp::LOCK, PlockOp::UNLOCK, PlockOp::GET);
    sim.ask(1, 0, unlock, false, false, 7, (0, 9));
    sim.ask(1, 0, get, true, false, 8, (0, 9));
    sim.settle();
    for number in [7, 8] {
        assert_eq!(sim.nodes[&2].core.owner_of(number), None, "file {number}");
    }
    sim.ask(1, 0, lock, true, false, 9, (0, 0));
    sim.ask(1, 0, lock, true, false, 10, (0, 0));
    sim.settle();
    let lone = sim.ask(1, 0, unlock, false, false, 9, (0, 0));
    assert_eq!(
        sim.nodes[&1].procs.requests[&lone].rv,
        Some(0),
        "decided on node 1"
    );
    sim.clock += 5;
    sim.settle();
    assert_eq!(
        sim.nodes[&2].core.owner_of(9),
        Some(1),
        "not idle long enough"
    );
    sim.clock += 6;
    sim.settle();
    for n in sim.nodes.values() {
        assert_eq!(n.core.owner_of(9), None, "node {}: file 9 given back", n.id);
        assert_eq!(n.core.owner_of(10), Some(1), "node {}: file 10 held", n.id);
    }
    sim.sync_all();
    sim.check_quiet();
}
