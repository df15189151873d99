//! PROTOCOL negotiation of several daemons on the simulated bus, with real PROTOCOL bytes:
//! joiners agree on 3.1.1/1.1.1; a newer minor negotiates down; another major is refused;
//! a stateful merge is detected and the merged node killed.

use std::collections::BTreeMap;

use dlm_controld::confchg::Confchg;
use dlm_controld::daemon_proto::{Action, DaemonProtocol, ProtoError, QuorumView};
use dlm_cpg::{Event, Group, SimBus, SimGroup};
use dlm_proto::wire::{Body, DAEMON_GROUP_NAME, Message, Version3};

struct Node {
    group: SimGroup,
    proto: DaemonProtocol,
    kicked: Vec<u32>,
    sent: Vec<Vec<u8>>,
}

fn perform(n: &mut Node, out: Vec<Action>, nodeid: u32) {
    for o in out {
        match o {
            Action::SendProtocol(p) => {
                let bytes = p.encode(nodeid).to_vec();
                n.sent.push(bytes.clone());
                n.group.mcast(&bytes).expect("mcast");
            }
            Action::Kick(k) => n.kicked.push(k),
            Action::Failed { .. } => {}
        }
    }
}

fn settle(bus: &SimBus, nodes: &mut BTreeMap<u32, Node>, now: u64, q: QuorumView) {
    loop {
        let mut moved = bus.step();
        for (&id, n) in nodes.iter_mut() {
            let mut evs = Vec::new();
            while let Some(e) = n.group.poll_event() {
                evs.push(e);
            }
            for e in evs {
                moved = true;
                let out = match e {
                    Event::ConfChg {
                        members,
                        left,
                        joined,
                    } => n
                        .proto
                        .handle_confchg(now, &Confchg::of(&members, &left, &joined)),
                    Event::Deliver {
                        nodeid, payload, ..
                    } => {
                        let m = Message::decode(&payload).expect("protocol bytes decode");
                        let Body::Protocol(p) = m.body else {
                            panic!("{m:?}")
                        };
                        n.proto.handle_protocol(nodeid, &p, q, false)
                    }
                    Event::Totem { .. } => Vec::new(),
                };
                perform(n, out, id);
            }
        }
        if !moved {
            break;
        }
    }
}

fn node(bus: &SimBus, id: u32) -> Node {
    Node {
        group: bus.join(id, DAEMON_GROUP_NAME).expect("join"),
        proto: DaemonProtocol::new(id),
        kicked: Vec::new(),
        sent: Vec::new(),
    }
}

#[test]
fn joiners_agree_and_first_announcement_is_cs() {
    for seed in 1..=10 {
        let bus = SimBus::new(seed);
        let mut nodes = BTreeMap::new();
        for id in 1..=3 {
            nodes.insert(id, node(&bus, id));
            settle(&bus, &mut nodes, 10 * u64::from(id), QuorumView::default());
        }
        for (id, n) in &nodes {
            assert_eq!(
                n.proto.negotiated(),
                Some(Ok((Version3([3, 1, 1]), Version3([1, 1, 1])))),
                "seed {seed} node {id}"
            );
            for other in 1..=3 {
                assert!(
                    n.proto.is_clean_member(other),
                    "seed {seed}: {id} does not trust {other}"
                );
            }
        }
        // node 1's first message: PROTOCOL on its own join, before negotiation, as C sends it
        let first = &nodes[&1].sent[0];
        assert_eq!(&first[..12], &[0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0]);
        assert_eq!(
            &first[40..56],
            &[3, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0]
        );
        assert!(first[56..].iter().all(|&b| b == 0));
    }
}

#[test]
fn mixed_maxima_negotiate_down_and_another_major_is_refused() {
    let bus = SimBus::new(3);
    let mut nodes = BTreeMap::new();
    nodes.insert(1, node(&bus, 1));
    settle(&bus, &mut nodes, 1, QuorumView::default());
    // a later 3.2.5 daemon and a 3.1.7 one join the 3.1.1 node: everyone runs 3.1.1
    let mut n2 = node(&bus, 2);
    n2.proto = DaemonProtocol::with_max(2, Version3([3, 2, 5]), Version3([1, 2, 1]));
    nodes.insert(2, n2);
    let mut n3 = node(&bus, 3);
    n3.proto = DaemonProtocol::with_max(3, Version3([3, 1, 7]), Version3([1, 1, 1]));
    nodes.insert(3, n3);
    settle(&bus, &mut nodes, 2, QuorumView::default());
    for id in 1..=3 {
        assert_eq!(
            nodes[&id].proto.negotiated(),
            Some(Ok((Version3([3, 1, 1]), Version3([1, 1, 1])))),
            "node {id}"
        );
    }
    // alone, the newer daemons would have picked the minimum of their own maxima
    let bus2 = SimBus::new(4);
    let mut pair = BTreeMap::new();
    for (id, d) in [(1u32, Version3([3, 2, 5])), (2, Version3([3, 2, 1]))] {
        let mut n = node(&bus2, id);
        n.proto = DaemonProtocol::with_max(id, d, Version3([1, 1, 1]));
        pair.insert(id, n);
    }
    settle(&bus2, &mut pair, 1, QuorumView::default());
    assert_eq!(
        pair[&1].proto.negotiated(),
        Some(Ok((Version3([3, 2, 1]), Version3([1, 1, 1]))))
    );
    assert_eq!(
        pair[&2].proto.negotiated(),
        Some(Ok((Version3([3, 2, 1]), Version3([1, 1, 1]))))
    );

    // a 4.x announcement with a run protocol of 4.0.0: adopting it is refused
    let mut m = DaemonProtocol::new(9);
    let _ = m.handle_confchg(1, &Confchg::new(&[8, 9], &[], &[9]));
    let mut foreign = m.ours();
    foreign.daemon_max.version = Version3([4, 0, 0]);
    foreign.daemon_run.version = Version3([4, 0, 0]);
    foreign.kernel_run.version = Version3([1, 1, 1]);
    let out = m.handle_protocol(8, &foreign, QuorumView::default(), false);
    assert!(matches!(out.as_slice(), [Action::SendProtocol(_)]));
    assert!(matches!(
        m.negotiated(),
        Some(Err(ProtoError::Incompatible { .. }))
    ));
}

#[test]
fn stateful_merge_is_detected_and_killed() {
    let bus = SimBus::new(5);
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, node(&bus, id));
        settle(&bus, &mut nodes, 1, QuorumView::default());
    }
    // everyone has started lockspaces
    for n in nodes.values_mut() {
        n.proto.set_stateful();
    }
    // node 3 is cut off at time 100, the majority stays quorate since time 5
    bus.partition(&[3], 1);
    settle(
        &bus,
        &mut nodes,
        100,
        QuorumView {
            quorate: true,
            quorate_since: 5,
            two_node: false,
        },
    );
    assert!(!nodes[&1].proto.nodes()[&3].member);
    // the merge: node 3 re-announces itself with STATEFUL, without having left cleanly
    bus.heal();
    settle(
        &bus,
        &mut nodes,
        200,
        QuorumView {
            quorate: true,
            quorate_since: 5,
            two_node: false,
        },
    );
    for id in [1, 2] {
        let n = &nodes[&id];
        assert!(
            n.proto.nodes()[&3].stateful_merge,
            "node {id} missed the stateful merge"
        );
        assert_eq!(
            n.kicked,
            vec![3],
            "node {id} should kill node 3 exactly once"
        );
        assert!(!n.proto.is_clean_member(3));
    }
}
