//! Cases the fault simulation (`native_faults.rs`) found, each step ordered by hand on the
//! same world (`world/`): each failed before its fix.

mod procs;
mod world;

use dlm_proto::kernel::PlockOp;
use dlm_proto::query::LockspaceFlags;
use dlm_proto::wire::{Message, MsgType};

use world::{Kind, Step, World};

/// Takes every enabled step but those `skip` refuses, until none is left.
fn run_but(w: &mut World, skip: impl Fn(&Step) -> bool) {
    loop {
        let steps: Vec<Step> = w.enabled(false).into_iter().filter(|s| !skip(s)).collect();
        if steps.is_empty() {
            return;
        }
        for s in steps {
            w.step(&s);
        }
    }
}

/// Takes the first enabled step, one at a time, until `done`.
fn until(w: &mut World, done: impl Fn(&World) -> bool) {
    while !done(w) {
        let s = w.enabled(false).into_iter().next().expect("a step to take");
        w.step(&s);
    }
}

/// `m` is a PLOCKS_DONE.
fn is_done(m: &[u8]) -> bool {
    Message::decode(m).is_ok_and(|m| m.header.msg_type == MsgType::PLOCKS_DONE)
}

/// Nodes 1 to `n` in a started lockspace.
fn cluster(n: u32) -> World {
    let mut w = World::new(1, n);
    for id in 1..=n {
        w.step(&Step::Join(id, Kind::Ours));
        w.settle();
    }
    assert!(w.quiet());
    w
}

/// A node fails while a joiner still receives the table: the joiner applies the purge of
/// the failed node in its place among what it saved — after the requests delivered before
/// the failure, as every other member did. (The purge went into the joiner's queue of
/// what it holds while stopped, ahead of those requests, which were applied after it: the
/// joiner kept a lock of the dead node that every other table had purged.)
#[test]
fn a_joiner_purges_a_failed_node_after_what_it_saved_before() {
    let mut w = cluster(3);
    w.fencing = true;
    w.configured = 4;
    w.step(&Step::Join(4, Kind::Ours));
    // the join, until node 1's table waits for the bus; then all but the table
    until(&mut w, |w| w.peer(1).outbox.iter().any(|m| is_done(m)));
    run_but(&mut w, |s| matches!(s, Step::Order(1)));
    let saving = w.peer(4).core.report().info.flags.0 & LockspaceFlags::SAVE_PLOCKS != 0;
    assert!(saving, "node 4 waits for the table");
    assert!(!w.peer(1).core.sending(), "node 1 has sent its table");
    // node 2's lock is delivered (node 4 saves it), then node 2 fails
    let lock = w.ask(2, 0, PlockOp::LOCK, true, false, 0, (0, 0));
    w.step(&lock);
    run_but(&mut w, |s| matches!(s, Step::Order(1)));
    w.step(&Step::Crash(2));
    // node 1's table reaches node 4 after the failure
    w.settle();
    assert!(w.quiet(), "{}", w.unquiet());
    w.check_quiet();
    let theirs = w
        .peer(4)
        .core
        .plocks()
        .dump(0)
        .filter(|e| e.nodeid == 2)
        .count();
    assert_eq!(theirs, 0, "node 4 holds the dead node's lock");
}

/// A node fails; while the others wait for its fencing, a fourth joins and is cut off
/// before that change starts: the newest change then has the same counts and members as
/// the one the failure made. Node 3 sent its START for the join's change in between, and so
/// must not NACK the failure's change afterwards: node 1 had matched that START past it,
/// matched the NACK to the newest change instead, and then matched node 3's START for the
/// newest change to nothing — the lockspace never started again.
#[test]
fn a_nack_never_poisons_the_newest_change() {
    let mut w = cluster(3);
    w.fencing = true;
    w.configured = 4;
    w.step(&Step::Crash(2));
    run_but(&mut w, |_| false);
    // node 4 joins; its START never reaches the others
    w.step(&Step::Join(4, Kind::Ours));
    let not_4 = |s: &Step| matches!(s, Step::Order(4));
    run_but(&mut w, not_4);
    assert!(w.can_fence());
    w.step(&Step::Fence(2));
    // node 3 sees the fencing done first: its START for the join's change goes out
    w.step(&Step::Poll(3));
    run_but(&mut w, not_4);
    w.step(&Step::Split(4));
    for _ in 0..3 {
        run_but(&mut w, |_| false);
        for n in [1, 3] {
            w.step(&Step::Poll(n));
        }
    }
    w.step(&Step::Heal);
    w.settle();
    assert!(w.quiet(), "{}", w.unquiet());
    w.check_quiet();
}

/// Node 3 joins, leaves before its START is sent, and joins again before the others have
/// started the change its leave made: the first START of its second time can only be for
/// a change at or after its second join. (It was matched to the change of its first join,
/// which has the same counts and members, and the newest change then waited for it for
/// ever; C matches it there too.)
#[test]
fn a_rejoined_node_starts_only_changes_since_its_join() {
    let mut w = cluster(2);
    w.configured = 3;
    w.step(&Step::Join(3, Kind::Ours));
    run_but(&mut w, |s| matches!(s, Step::Order(3)));
    w.step(&Step::Leave(3));
    run_but(&mut w, |s| matches!(s, Step::Order(_)));
    w.step(&Step::Join(3, Kind::Ours));
    w.settle();
    assert!(w.quiet(), "{}", w.unquiet());
    w.check_quiet();
}

/// Node 2 holds a lock; node 3 joins and node 2's START for that join waits for the bus
/// while node 1 goes (`out`) and its daemon joins again; node 2's process then waits for
/// the lock (before node 2 sees node 1's join, so its START for that change goes after),
/// that old START reaches the bus, then the STARTs of nodes 1 and 3 for node 1's join,
/// then node 2's request and its START for node 1's join. Every table must agree.
fn a_late_start_across_a_rejoin(out: impl FnOnce(&mut World)) -> World {
    let mut w = cluster(2);
    let held = w.ask(2, 1, PlockOp::LOCK, true, false, 0, (0, 9));
    w.step(&held);
    w.settle();
    w.fencing = true;
    w.configured = 3;
    w.step(&Step::Join(3, Kind::Ours));
    run_but(&mut w, |s| matches!(s, Step::Order(2)));
    out(&mut w);
    w.step(&Step::Join(1, Kind::Ours));
    let lock = w.ask(2, 0, PlockOp::LOCK, true, true, 0, (0, 9));
    w.step(&lock);
    w.step(&Step::Order(2));
    run_but(&mut w, |s| matches!(s, Step::Order(2)));
    w.settle();
    assert!(w.quiet(), "{}", w.unquiet());
    w.check_quiet();
    w
}

/// Node 2's START for node 3's join goes out late: after node 1 failed, was fenced, and
/// its daemon joined again. The new daemon does not take that START, whose member list
/// has the same nodes and counts as its own change, for a START of its change: it waits
/// for node 2's START for the change that added it. (It took it: its change started
/// before the data node's, it saved requests the data node's table already held, and
/// its table held node 2's lock twice; C, which names members by nodeid only, takes it
/// too.)
#[test]
fn a_start_from_before_a_daemon_restarted_is_not_for_its_change() {
    a_late_start_across_a_rejoin(|w| {
        w.step(&Step::Crash(1));
        run_but(w, |s| matches!(s, Step::Order(2)));
        assert!(w.can_fence());
        w.step(&Step::Fence(1));
    });
}

/// The same with node 1 leaving cleanly and its daemon, the same process, joining again:
/// the member list names the same processes as before, and node 2's START for node 3's
/// join still knows node 1 by the nonce of its first time, which node 1 has not now.
/// (With process ids alone it took that START for its change, as above.)
#[test]
fn a_start_from_before_a_daemon_left_and_joined_again_is_not_for_its_change() {
    let w = a_late_start_across_a_rejoin(|w| {
        w.step(&Step::Leave(1));
        run_but(w, |s| matches!(s, Step::Order(2)));
    });
    assert_eq!(w.peer(1).pid, Some(w.peer(1).daemon), "the same process");
}
