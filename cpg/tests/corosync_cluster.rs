//! Three real corosync nodes in network namespaces (udpu, token 1000 ms): one total order
//! on every node; SIGKILL of a corosync is NodeDown on the others; a clean stop is
//! ProcDown; a node cut off sees the others go and they see it go, with quorum lost only on
//! its side; healing merges with NodeUp joins on both sides.

mod support;

use std::time::Duration;

use dlm_cpg::{Cfg, CorosyncGroup, Event, Group, Member, Quorum, Reason};
use support::{Cluster, wait_for};

const NAME: &[u8] = b"dlm:ls:cluster\0";

/// Waits for the next confchg on `g`, collecting deliveries on the way into `seen`.
fn next_confchg(
    g: &mut CorosyncGroup,
    seen: &mut Vec<Vec<u8>>,
) -> Option<(Vec<Member>, Vec<Member>, Vec<Member>)> {
    wait_for(Duration::from_secs(20), || {
        g.dispatch().ok()?;
        while let Some(e) = g.poll_event() {
            match e {
                Event::ConfChg {
                    members,
                    left,
                    joined,
                } => return Some((members, left, joined)),
                Event::Deliver { payload, .. } => seen.push(payload),
                Event::Totem { .. } => {}
            }
        }
        None
    })
}

/// Joins on node k (retrying while its corosync starts) and waits until the group has
/// `members` members as seen from there.
fn join(c: &Cluster, k: usize, members: usize) -> CorosyncGroup {
    let mut g = c.run(k, || {
        wait_for(Duration::from_secs(20), || {
            CorosyncGroup::join(NAME, false).ok()
        })
        .expect("join")
    });
    let mut junk = Vec::new();
    while let Some((m, _, _)) = next_confchg(&mut g, &mut junk) {
        if m.len() == members {
            return g;
        }
    }
    panic!("node {k} never saw {members} members");
}

fn quorum_on(c: &Cluster, k: usize) -> Quorum {
    c.run(k, || {
        wait_for(Duration::from_secs(20), || Quorum::new().ok()).expect("quorum")
    })
}

fn quorate_eventually(q: &mut Quorum, want: bool) -> bool {
    wait_for(Duration::from_secs(20), || {
        q.dispatch().ok()?;
        while q.poll_change().is_some() {}
        (q.quorate().ok()? == want).then_some(())
    })
    .is_some()
}

#[test]
fn three_nodes_order_failures_partition_merge() {
    let mut c = Cluster::start("cl", 3);
    // formation: everyone sees everyone (members joining one after another)
    let mut g1 = join(&c, 1, 1);
    let mut g2 = join(&c, 2, 2);
    let mut g3 = join(&c, 3, 3);
    let mut seen = vec![Vec::new(); 4];
    next_confchg(&mut g1, &mut seen[1]).expect("1 sees 2");
    next_confchg(&mut g1, &mut seen[1]).expect("1 sees 3");
    next_confchg(&mut g2, &mut seen[2]).expect("2 sees 3");

    // one total order: interleaved senders, identical sequences everywhere
    for i in 0..100u32 {
        for (k, g) in [&mut g1, &mut g2, &mut g3].into_iter().enumerate() {
            g.mcast(format!("{}-{i}", k + 1).as_bytes()).expect("mcast");
        }
    }
    for g in [&mut g1, &mut g2, &mut g3] {
        assert!(g.flush().expect("flush"));
    }
    let mut orders = vec![Vec::new(); 4];
    for (k, g) in [(1, &mut g1), (2, &mut g2), (3, &mut g3)] {
        wait_for(Duration::from_secs(20), || {
            g.dispatch().ok()?;
            while let Some(e) = g.poll_event() {
                if let Event::Deliver { payload, .. } = e {
                    orders[k].push(payload);
                }
            }
            (orders[k].len() >= 300).then_some(())
        })
        .expect("all 300 messages delivered");
    }
    assert_eq!(orders[1], orders[2]);
    assert_eq!(orders[1], orders[3]);
    for s in 1..=3 {
        let mine: Vec<&Vec<u8>> = orders[1]
            .iter()
            .filter(|p| p.starts_with(format!("{s}-").as_bytes()))
            .collect();
        let want: Vec<Vec<u8>> = (0..100).map(|i| format!("{s}-{i}").into_bytes()).collect();
        assert_eq!(
            mine.into_iter().cloned().collect::<Vec<_>>(),
            want,
            "sender {s} FIFO"
        );
    }

    // SIGKILL node 3's corosync: NodeDown on nodes 1 and 2, and node 3's handle is dead
    c.signal(3, libc::SIGKILL);
    for g in [&mut g1, &mut g2] {
        let (members, left, _) = next_confchg(g, &mut seen[0]).expect("confchg after kill");
        assert_eq!(members.len(), 2);
        assert_eq!((left[0].nodeid, left[0].reason), (3, Reason::NodeDown));
    }
    assert!(wait_for(Duration::from_secs(10), || g3.dispatch().err()).is_some());
    drop(g3);
    c.start_node(3);
    let mut g3 = join(&c, 3, 3);
    for g in [&mut g1, &mut g2] {
        let (members, _, joined) = next_confchg(g, &mut seen[0]).expect("rejoin");
        assert_eq!((members.len(), joined[0].nodeid), (3, 3));
        // Join if the process joined after its node merged into the ring; NodeUp if it had
        // joined while its new corosync was still alone (a merge, as after a partition)
        assert!(
            matches!(joined[0].reason, Reason::Join | Reason::NodeUp),
            "{joined:?}"
        );
    }

    // a clean stop of node 2's corosync: ProcDown
    c.signal(2, libc::SIGTERM);
    for g in [&mut g1, &mut g3] {
        let (_, left, _) = next_confchg(g, &mut seen[0]).expect("confchg after stop");
        assert_eq!((left[0].nodeid, left[0].reason), (2, Reason::ProcDown));
    }
    drop(g2);
    c.start_node(2);
    let mut g2 = join(&c, 2, 3);
    for g in [&mut g1, &mut g3] {
        next_confchg(g, &mut seen[0]).expect("2 back");
    }

    // cut node 3 off: both sides see the other go; quorum only on the majority side
    let mut q1 = quorum_on(&c, 1);
    let mut q3 = quorum_on(&c, 3);
    assert!(quorate_eventually(&mut q1, true));
    c.link(3, false);
    for g in [&mut g1, &mut g2] {
        let (members, left, _) = next_confchg(g, &mut seen[0]).expect("cut");
        assert_eq!(
            (members.len(), left[0].nodeid, left[0].reason),
            (2, 3, Reason::NodeDown)
        );
    }
    let (members, left, _) = next_confchg(&mut g3, &mut seen[0]).expect("cut, seen from 3");
    assert_eq!(members.len(), 1);
    let mut gone: Vec<u32> = left.iter().map(|m| m.nodeid).collect();
    gone.sort_unstable();
    assert_eq!(gone, vec![1, 2]);
    assert!(left.iter().all(|m| m.reason == Reason::NodeDown));
    assert!(
        quorate_eventually(&mut q3, false),
        "the lone node kept quorum"
    );
    assert!(q1.quorate().expect("q1"), "the majority lost quorum");
    // CPG keeps working in the minority partition (corosync-notes §7.2)
    g3.mcast(b"alone").expect("mcast");
    let mut alone = Vec::new();
    wait_for(Duration::from_secs(10), || {
        g3.dispatch().ok()?;
        while let Some(e) = g3.poll_event() {
            if let Event::Deliver { payload, .. } = e {
                alone.push(payload);
            }
        }
        (!alone.is_empty()).then_some(())
    })
    .expect("minority delivery");

    // heal: the merge arrives as NodeUp joins on both sides
    c.link(3, true);
    let (members, _, joined) = next_confchg(&mut g1, &mut seen[1]).expect("merge on 1");
    assert_eq!(members.len(), 3);
    assert!(
        joined
            .iter()
            .any(|m| m.nodeid == 3 && m.reason == Reason::NodeUp),
        "{joined:?}"
    );
    let (members, _, joined) = next_confchg(&mut g3, &mut seen[3]).expect("merge on 3");
    assert_eq!(members.len(), 3);
    let mut back: Vec<(u32, Reason)> = joined.iter().map(|m| (m.nodeid, m.reason)).collect();
    back.sort_unstable();
    assert_eq!(back, vec![(1, Reason::NodeUp), (2, Reason::NodeUp)]);
    assert!(quorate_eventually(&mut q3, true));

    // cfg kill_node (dlm_controld's answer to a stateful merge): node 2's corosync goes
    let cfg1 = c.run(1, || Cfg::new().expect("cfg"));
    cfg1.kill_node(2, "dlm-cpg test").expect("kill_node");
    assert!(
        c.exits_within(2, Duration::from_secs(20)),
        "node 2's corosync survived kill_node"
    );
    let (members, left, _) = next_confchg(&mut g1, &mut seen[1]).expect("after kill_node");
    assert_eq!((members.len(), left[0].nodeid), (2, 2));
    drop((g1, g2, g3, q1, q3, cfg1));
}
