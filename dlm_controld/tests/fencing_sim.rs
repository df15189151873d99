//! Fencing of several daemons on the simulated bus, with real PROTOCOL, FENCE_RESULT and
//! FENCE_CLEAR bytes: who runs the agent and with what stdin, how results move the other
//! nodes, failed agents and the next actor, fence_ack, a node that rejoins cleanly,
//! startup fencing, and the fence-in-progress-unknown handshake of a new node.

use std::collections::BTreeMap;

use dlm_controld::config::{ConfFile, parse_conf};
use dlm_controld::daemon_proto::{self, DaemonProtocol, QuorumView};
use dlm_controld::fencing::{FenceEnv, FenceOpts, Fencing, Out, RESULT_ACKED, agent_args};
use dlm_cpg::{Event, Group, SimBus, SimGroup};
use dlm_proto::wire::{Body, DAEMON_GROUP_NAME, FenceFlags, FenceResult, Message, MsgType};

const WALL: u64 = 1_795_993_000;

/// The world at tick `now` (wall clock `WALL + now`).
fn fence_env(now: u64, quorate: bool, ring: u64) -> FenceEnv {
    FenceEnv {
        now,
        wall: WALL + now,
        quorate,
        cluster_ring_seq: ring,
    }
}

struct Node {
    group: SimGroup,
    proto: DaemonProtocol,
    fence: Fencing,
    ring: u64,
    /// Agents started here: (node, agent, stdin, pid), and which are still running.
    agents: Vec<(u32, String, String, u32)>,
    running: BTreeMap<u32, u32>,
    cancelled: Vec<u32>,
    kicked: Vec<u32>,
    log: Vec<String>,
}

struct Cluster {
    bus: SimBus,
    nodes: BTreeMap<u32, Node>,
    now: u64,
    quorate: bool,
    opts: FenceOpts,
    conf: ConfFile,
    next_pid: u32,
}

impl Cluster {
    fn new(seed: u64, opts: FenceOpts, conf: &str) -> Self {
        Self {
            bus: SimBus::new(seed),
            nodes: BTreeMap::new(),
            now: 100,
            quorate: true,
            opts,
            conf: parse_conf(conf).expect("dlm.conf"),
            next_pid: 500,
        }
    }

    fn env(&self, n: &Node) -> FenceEnv {
        fence_env(self.now, self.quorate, n.ring)
    }

    /// Node `id` starts: a daemon with the configured nodelist 1..=3 joins the group.
    fn start(&mut self, id: u32) {
        let group = self.bus.join(id, DAEMON_GROUP_NAME).expect("join");
        let fence = Fencing::new(
            id,
            self.opts,
            self.conf.clone(),
            &[1, 2, 3],
            (self.now, WALL + self.now),
        );
        self.nodes.insert(
            id,
            Node {
                group,
                proto: DaemonProtocol::new(id),
                fence,
                ring: 0,
                agents: Vec::new(),
                running: BTreeMap::new(),
                cancelled: Vec::new(),
                kicked: Vec::new(),
                log: Vec::new(),
            },
        );
        self.settle();
    }

    fn perform(&mut self, id: u32, out: Vec<Out>) {
        let mut follow = Vec::new();
        for o in out {
            let Some(n) = self.nodes.get_mut(&id) else {
                return;
            };
            match o {
                Out::RunAgent {
                    nodeid,
                    agent,
                    stdin,
                    ..
                } => {
                    self.next_pid += 1;
                    let pid = self.next_pid;
                    n.agents.push((nodeid, agent, stdin, pid));
                    n.running.insert(nodeid, pid);
                    follow.push((nodeid, pid));
                }
                Out::CancelAgent { nodeid, .. } => {
                    n.running.remove(&nodeid);
                    n.cancelled.push(nodeid);
                }
                Out::SendResult {
                    nodeid,
                    result,
                    walltime,
                } => {
                    let bytes = FenceResult {
                        flags: FenceFlags(0),
                        nodeid,
                        result,
                        fence_walltime: walltime,
                    }
                    .encode(MsgType::FENCE_RESULT, id);
                    n.group.mcast(&bytes).expect("mcast");
                }
                Out::SendClear {
                    nodeid,
                    result,
                    flags,
                } => {
                    let bytes = FenceResult {
                        flags: FenceFlags(flags),
                        nodeid,
                        result,
                        fence_walltime: 0,
                    }
                    .encode(MsgType::FENCE_CLEAR, id);
                    n.group.mcast(&bytes).expect("mcast");
                }
                Out::Kick(k) => n.kicked.push(k),
                Out::KickMerged(k) => {
                    n.kicked.push(k);
                    n.proto.mark_killed(k);
                }
                Out::Log(_, line) => n.log.push(line),
            }
        }
        for (nodeid, pid) in follow {
            let n = self.nodes.get_mut(&id).expect("node");
            let more = n.fence.agent_started(nodeid, pid);
            self.perform(id, more);
        }
    }

    fn handle(&mut self, id: u32, e: Event) {
        let q = QuorumView {
            quorate: self.quorate,
            quorate_since: 1,
            two_node: false,
        };
        let n = self.nodes.get_mut(&id).expect("node");
        let mut env = fence_env(self.now, self.quorate, n.ring);
        let out;
        match e {
            Event::ConfChg {
                members,
                left,
                joined,
            } => {
                let members: Vec<u32> = members.iter().map(|m| m.nodeid).collect();
                let left: Vec<(u32, u32)> =
                    left.iter().map(|m| (m.nodeid, m.reason.to_raw())).collect();
                let joined: Vec<u32> = joined.iter().map(|m| m.nodeid).collect();
                let po = n.proto.handle_confchg(self.now, &members, &left, &joined);
                let mut failed = Vec::new();
                for o in po {
                    match o {
                        daemon_proto::Out::SendProtocol(p) => {
                            n.group.mcast(&p.encode(id)).expect("mcast");
                        }
                        daemon_proto::Out::Kick(k) => n.kicked.push(k),
                        daemon_proto::Out::Failed { nodeid, reason } => {
                            failed.push((nodeid, reason));
                        }
                    }
                }
                out = n
                    .fence
                    .handle_confchg(env, &n.proto, &members, &left, &joined, &failed);
            }
            Event::Totem { ring, .. } => {
                // the quorum service's ring follows the totem ring here
                n.ring = ring.seq;
                env.cluster_ring_seq = ring.seq;
                out = n.fence.handle_totem(env, &n.proto, ring.seq);
            }
            Event::Deliver {
                nodeid, payload, ..
            } => {
                let m = Message::decode(&payload).expect("message bytes decode");
                match m.body {
                    Body::Protocol(p) => {
                        let needs = n.fence.needs_fencing(nodeid);
                        for o in n.proto.handle_protocol(nodeid, &p, q, needs) {
                            match o {
                                daemon_proto::Out::SendProtocol(p) => {
                                    n.group.mcast(&p.encode(id)).expect("mcast");
                                }
                                daemon_proto::Out::Kick(k) => n.kicked.push(k),
                                daemon_proto::Out::Failed { .. } => {}
                            }
                        }
                        if matches!(n.proto.negotiated(), Some(Ok(_))) {
                            n.fence.allow();
                        }
                        out = n.fence.work(env, &n.proto);
                    }
                    Body::FenceResult(f) => {
                        out = n.fence.receive_result(
                            env,
                            &n.proto,
                            nodeid,
                            f.nodeid,
                            f.result,
                            f.fence_walltime,
                        );
                    }
                    Body::FenceClear(f) => {
                        out = n
                            .fence
                            .receive_clear(env, &n.proto, nodeid, f.nodeid, f.result, f.flags.0);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        self.perform(id, out);
    }

    /// Delivers everything pending, in the bus's order, until quiet.
    fn settle(&mut self) {
        loop {
            let mut moved = self.bus.step();
            let ids: Vec<u32> = self.nodes.keys().copied().collect();
            for id in ids {
                while let Some(e) = self.nodes.get_mut(&id).and_then(|n| n.group.poll_event()) {
                    moved = true;
                    self.handle(id, e);
                }
            }
            if !moved {
                break;
            }
        }
    }

    /// `secs` pass; every node runs its once-a-second fence work.
    fn tick(&mut self, secs: u64) {
        for _ in 0..secs {
            self.now += 1;
            let ids: Vec<u32> = self.nodes.keys().copied().collect();
            for id in ids {
                let n = &self.nodes[&id];
                if !n.fence.retry() {
                    continue;
                }
                let env = self.env(n);
                let n = self.nodes.get_mut(&id).expect("node");
                let out = n.fence.work(env, &n.proto);
                self.perform(id, out);
            }
            self.settle();
        }
    }

    /// The agent `node` runs for `subject` exits with `status`.
    fn agent_exits(&mut self, node: u32, subject: u32, status: i32) {
        let n = self.nodes.get_mut(&node).expect("node");
        let pid = n.running.remove(&subject).expect("an agent runs");
        let env = fence_env(self.now, self.quorate, n.ring);
        let out = n.fence.agent_exited(env, &n.proto, subject, pid, status);
        self.perform(node, out);
        self.settle();
    }

    fn crash(&mut self, id: u32) {
        self.bus.crash(id);
        self.nodes.remove(&id);
        self.settle();
    }

    fn node(&self, id: u32) -> &Node {
        &self.nodes[&id]
    }
}

fn opts() -> FenceOpts {
    FenceOpts {
        post_join_delay: 10,
        ..FenceOpts::default()
    }
}

fn three(seed: u64, conf: &str) -> Cluster {
    let mut c = Cluster::new(seed, opts(), conf);
    for id in 1..=3 {
        c.start(id);
    }
    c
}

#[test]
fn all_start_together_startup_fencing_settles_without_fencing() {
    for seed in 1..=20 {
        let c = three(seed, "");
        for id in 1..=3 {
            let n = c.node(id);
            assert!(n.fence.startup_nodes().is_empty(), "seed {seed} node {id}");
            assert!(!n.fence.fipu(), "seed {seed} node {id}: {:?}", n.log);
            assert_eq!(n.fence.in_progress(), 0);
            assert!(n.agents.is_empty());
        }
    }
}

#[test]
fn failed_node_is_fenced_by_the_lowest_survivor_after_post_join_delay() {
    for seed in 1..=20 {
        let mut c = three(seed, "");
        c.tick(20);
        c.crash(3);
        let failed_at = c.now;
        for id in [1, 2] {
            assert!(c.node(id).fence.needs_fencing(3), "seed {seed}");
            assert_eq!(c.node(id).fence.in_progress(), 3);
        }
        // the cluster formed at 100; by 120 post_join_delay (10 s) has passed: at once
        assert_eq!(
            c.node(1).agents.len(),
            1,
            "seed {seed}: {:?}",
            c.node(1).log
        );
        assert!(c.node(2).agents.is_empty(), "node 2 defers to node 1");
        let (subject, agent, stdin, _) = &c.node(1).agents[0];
        assert_eq!(*subject, 3);
        assert_eq!(agent, "dlm_stonith");
        assert_eq!(stdin, &format!("node=3\nfail_time={}\n", WALL + failed_at));
        assert!(
            c.node(2)
                .log
                .iter()
                .any(|l| l == "fence request 3 defer to 1")
        );
        // no result yet: the lockspaces still wait
        c.tick(3);
        assert!(c.node(2).fence.needs_fencing(3));
        c.agent_exits(1, 3, 0);
        for id in [1, 2] {
            let n = c.node(id);
            assert!(!n.fence.needs_fencing(3), "seed {seed} node {id}");
            assert_eq!(n.fence.fence_time(3), Some(c.now));
            assert_eq!(n.fence.in_progress(), 0);
            let f = n.fence.nodes().find(|(i, _)| *i == 3).expect("node 3").1;
            assert_eq!(f.actor_done, 1);
            assert_eq!(f.fence_walltime, WALL + c.now);
        }
    }
}

#[test]
fn a_node_that_joined_recently_delays_fencing() {
    let mut c = three(7, "");
    // node 3 fails while the cluster is 2 s old: fencing waits for post_join_delay
    c.tick(2);
    c.crash(3);
    assert!(c.node(1).agents.is_empty());
    assert!(
        c.node(1)
            .fence
            .nodes()
            .any(|(i, n)| i == 3 && n.delay_fencing),
        "{:?}",
        c.node(1).log
    );
    c.tick(9);
    assert_eq!(c.node(1).agents.len(), 1, "{:?}", c.node(1).log);
}

#[test]
fn a_failed_agent_passes_to_the_next_actor_then_repeats() {
    let mut c = Cluster::new(3, opts(), "");
    for id in 1..=4 {
        if id <= 3 {
            c.start(id);
        }
    }
    c.tick(20);
    c.crash(3);
    assert_eq!(c.node(1).agents.len(), 1);
    c.agent_exits(1, 3, 1);
    // node 1 failed: node 2 is the next actor, from the next second on (C's pace)
    assert!(c.node(2).fence.needs_fencing(3));
    assert!(c.node(2).agents.is_empty(), "{:?}", c.node(2).log);
    c.tick(1);
    assert_eq!(c.node(2).agents.len(), 1, "{:?}", c.node(2).log);
    assert_eq!(c.node(1).agents.len(), 1);
    c.agent_exits(2, 3, 2);
    // every actor failed: repeat_failed_fencing restores the list, node 1 tries again
    assert_eq!(c.node(1).agents.len(), 1, "not within the same second");
    c.tick(1);
    assert_eq!(c.node(1).agents.len(), 2, "{:?}", c.node(1).log);
    assert!(c.node(1).fence.needs_fencing(3));
    c.agent_exits(1, 3, 0);
    assert!(!c.node(2).fence.needs_fencing(3));
    let f = c.node(2).fence.nodes().find(|(i, _)| *i == 3).expect("3").1;
    assert_eq!(f.actor_done, 1);
}

/// An agent that always fails (a dead BMC) is retried about once a second across the
/// cluster, as C does, however fast it fails: here it fails at once, as often as it is run.
#[test]
fn a_failing_agent_is_retried_at_cs_pace() {
    let mut c = three(5, "");
    c.tick(20);
    c.crash(3);
    for _ in 0..13 {
        // within one second, every agent that runs fails at once, again and again
        for _ in 0..1_000 {
            let Some(&actor) = [1, 2]
                .iter()
                .find(|&&id| c.node(id).running.contains_key(&3))
            else {
                break;
            };
            c.agent_exits(actor, 3, 1);
        }
        c.tick(1);
    }
    let runs = c.node(1).agents.len() + c.node(2).agents.len();
    assert!((12..=15).contains(&runs), "{runs} agent runs in 13 s");
    assert!(c.node(1).fence.needs_fencing(3), "still unfenced");
}

#[test]
fn fence_ack_cancels_the_running_agent_everywhere() {
    let mut c = three(11, "");
    c.tick(20);
    c.crash(3);
    assert_eq!(c.node(1).running.len(), 1);
    // the operator on node 2: dlm_tool fence_ack 3
    let env = c.env(c.node(2));
    let ack = c.node(2).fence.fence_ack(env, 3);
    assert_eq!(
        ack,
        Out::SendResult {
            nodeid: 3,
            result: RESULT_ACKED,
            walltime: WALL + c.now
        }
    );
    c.perform(2, vec![ack]);
    c.settle();
    assert_eq!(c.node(1).cancelled, vec![3]);
    assert!(c.node(1).running.is_empty());
    for id in [1, 2] {
        assert!(!c.node(id).fence.needs_fencing(3));
        assert_eq!(c.node(id).fence.in_progress(), 0);
    }
    // a needless ack is refused by everyone, as C: "no need_fencing"
    let ack = c.node(2).fence.fence_ack(env, 1);
    c.perform(2, vec![ack]);
    c.settle();
    assert!(
        c.node(1)
            .log
            .iter()
            .any(|l| l.contains("receive_fence_result 1 from 2 result -125 no need_fencing"))
    );
}

#[test]
fn no_fencing_without_quorum() {
    let mut c = three(13, "");
    c.tick(20);
    c.quorate = false;
    c.crash(3);
    c.tick(5);
    assert!(c.node(1).agents.is_empty());
    assert!(
        c.node(1)
            .log
            .iter()
            .any(|l| l == "fence work wait for quorum")
    );
    c.quorate = true;
    c.tick(1);
    assert_eq!(c.node(1).agents.len(), 1);
}

#[test]
fn configured_devices_parallel_then_next_priority() {
    let conf = "device foo:1 /sbin/fence_a ipaddr=1.2.3.4 login=x\n\
                connect foo:1 node=3 port=3\n\
                \n\
                device foo:2 /sbin/fence_a ipaddr=1.2.3.5\n\
                connect foo:2 node=3 port=4\n\
                \n\
                device bar /sbin/fence_b\n\
                connect bar node=3\n";
    let mut c = three(17, conf);
    c.tick(20);
    c.crash(3);
    let t = WALL + c.now;
    assert_eq!(
        c.node(1).agents[0].2,
        format!("ipaddr=1.2.3.4\nlogin=x\nnode=3\nport=3\nfail_time={t}\n")
    );
    // foo:1 succeeded: its parallel sibling foo:2 must run too
    c.agent_exits(1, 3, 0);
    assert!(c.node(2).fence.needs_fencing(3));
    assert_eq!(c.node(1).agents.len(), 2, "{:?}", c.node(1).log);
    assert_eq!(
        c.node(1).agents[1].2,
        format!("ipaddr=1.2.3.5\nnode=3\nport=4\nfail_time={t}\n")
    );
    // foo:2 failed: the next priority (bar) runs
    c.agent_exits(1, 3, 1);
    assert_eq!(c.node(1).agents.len(), 3);
    assert_eq!(c.node(1).agents[2].1, "/sbin/fence_b");
    assert_eq!(c.node(1).agents[2].2, format!("node=3\nfail_time={t}\n"));
    c.agent_exits(1, 3, 0);
    assert!(!c.node(2).fence.needs_fencing(3));
}

#[test]
fn agent_stdin_as_observed_from_c() {
    // spec §4.5: `fence_all /path/agent ipaddr=1.2.3.4 login=x`, startup fencing of node 2
    let conf = parse_conf("fence_all /path/agent ipaddr=1.2.3.4 login=x\n").expect("conf");
    let m = &conf.fence_methods(2)[0];
    assert_eq!(
        agent_args(m, 2, "fail_time=1795993876\n").as_deref(),
        Some("ipaddr=1.2.3.4\nlogin=x\nnode=2\nfail_time=1795993876\n")
    );
    assert_eq!(
        agent_args(m, 1, "action=on\n").as_deref(),
        Some("ipaddr=1.2.3.4\nlogin=x\nnode=1\naction=on\n")
    );
    let long = format!("fence_all /a k={}\n", "x".repeat(5000));
    let conf = parse_conf(&long).expect("conf");
    assert_eq!(agent_args(&conf.fence_methods(1)[0], 1, ""), None);
}

#[test]
fn a_node_that_never_joins_is_startup_fenced() {
    let mut c = Cluster::new(19, opts(), "");
    c.start(1);
    c.start(2);
    // node 3 is configured but never starts: after post_join_delay, node 1 fences it
    assert_eq!(c.node(1).fence.startup_nodes(), &[3]);
    assert_eq!(c.node(1).fence.in_progress(), 1);
    c.tick(11);
    assert_eq!(c.node(1).agents.len(), 1, "{:?}", c.node(1).log);
    let (subject, _, stdin, _) = &c.node(1).agents[0];
    assert_eq!(*subject, 3);
    // fail_time is the cluster join time minus one
    assert_eq!(stdin, &format!("node=3\nfail_time={}\n", WALL + 100 - 1));
    assert!(
        c.node(2)
            .fence
            .nodes()
            .any(|(i, n)| i == 3 && n.left_reason == -1)
    );
    c.agent_exits(1, 3, 0);
    for id in [1, 2] {
        assert!(!c.node(id).fence.fipu(), "{:?}", c.node(id).log);
        assert_eq!(c.node(id).fence.in_progress(), 0);
    }
}

#[test]
fn a_new_node_waits_for_fence_clear_from_the_old_members() {
    let mut c = three(23, "");
    c.tick(20);
    c.crash(3);
    assert_eq!(c.node(1).running.len(), 1);
    // node 3 restarts while its fencing is still running (it was power-cycled by hand)
    c.bus.restart(3);
    c.tick(1);
    // a new daemon on node 4's place: use node 3 again, which must wait for clears
    c.start(3);
    // node 3 rejoined cleanly: everyone cancels the agent and considers it fenced
    assert_eq!(c.node(1).cancelled, vec![3], "{:?}", c.node(1).log);
    for id in 1..=3 {
        assert!(!c.node(id).fence.needs_fencing(3), "node {id}");
    }
    // node 3 got CLEAR_STARTUP from node 1 when it joined, while its own fencing was
    // pending, and CLEAR_FIPU once that was settled: it may start lockspaces
    assert!(c.node(3).fence.startup_nodes().is_empty());
    assert!(!c.node(3).fence.fipu(), "{:?}", c.node(3).log);
    let clears: Vec<&String> = c
        .node(3)
        .log
        .iter()
        .filter(|l| l.starts_with("receive_fence_clear from 1 for 3 result 0"))
        .collect();
    assert!(
        clears
            == [
                "receive_fence_clear from 1 for 3 result 0 flags 2",
                "receive_fence_clear from 1 for 3 result 0 flags 4"
            ]
            || clears == ["receive_fence_clear from 1 for 3 result 0 flags 6"],
        "{clears:?}"
    );
}

#[test]
fn without_startup_fencing_everyone_clears_fipu_together() {
    let o = FenceOpts {
        startup: false,
        ..opts()
    };
    for seed in 1..=10 {
        let mut c = Cluster::new(seed, o, "");
        for id in 1..=3 {
            c.start(id);
        }
        c.tick(1);
        for id in 1..=3 {
            assert!(
                !c.node(id).fence.fipu(),
                "seed {seed} node {id}: {:?}",
                c.node(id).log
            );
        }
    }
}
