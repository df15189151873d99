//! Fencing of several daemons on the simulated bus, with real PROTOCOL, FENCE_RESULT and
//! FENCE_CLEAR bytes: who runs the agent and with what stdin, how results move the other
//! nodes, failed agents and the next actor, fence_ack, a node that rejoins cleanly,
//! startup fencing, and the fence-in-progress-unknown handshake of a new node.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use dlm_controld::confchg::Confchg;
use dlm_controld::config::{ConfFile, parse_conf};
use dlm_controld::daemon_core::{Action, DaemonCore, Now, Start};
use dlm_controld::daemon_proto::QuorumView;
use dlm_controld::fencing::{AgentState, FenceOpts, Fencing, InProgress, RESULT_ACKED, agent_args};
use dlm_cpg::{Event, Group, SimBus, SimGroup};
use dlm_proto::wire::{DAEMON_GROUP_NAME, FenceFlags, FenceResult, MsgType};

const WALL: u64 = 1_795_993_000;

/// The time at tick `now` (wall clock `WALL + now`).
fn at(now: u64) -> Now {
    Now {
        mono: now,
        wall: WALL + now,
    }
}

/// A node's log lines, as `tracing` events of its core.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Captured {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0 = format!("{v:?}");
                }
            }
        }
        let mut m = Message(String::new());
        event.record(&mut m);
        self.0.lock().expect("log").push(m.0);
    }
}

struct Node {
    group: SimGroup,
    core: DaemonCore,
    /// Agents started here: (node, agent, stdin, pid), and which are still running.
    agents: Vec<(u32, String, String, u32)>,
    running: BTreeMap<u32, u32>,
    cancelled: Vec<u32>,
    kicked: Vec<u32>,
    log: Vec<String>,
    captured: Captured,
    negotiated: bool,
}

impl Node {
    fn fence(&self) -> &Fencing {
        self.core.fencing()
    }

    /// The quorum service's word: the world's quorum now, the ring the group's.
    fn quorum(&mut self, now: Now, quorate: bool) {
        let (_, ring) = self.core.quorum();
        self.with(|c| c.handle_quorum(now, quorate, ring, &[1, 2, 3]));
    }

    /// `f` on this node's core, its log lines kept.
    fn with<T>(&mut self, f: impl FnOnce(&mut DaemonCore) -> T) -> T {
        use tracing_subscriber::layer::SubscriberExt;
        let sub = tracing_subscriber::registry().with(self.captured.clone());
        let r = tracing::subscriber::with_default(sub, || f(&mut self.core));
        self.log.append(&mut self.captured.0.lock().expect("log"));
        r
    }
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

    /// Node `id` starts: a daemon with the configured nodelist 1..=3 joins the group
    /// (no quorum service: its ring follows the group's, as the embedded daemon's).
    fn start(&mut self, id: u32) {
        self.join(id);
        self.settle();
    }

    /// A daemon joins the group; nothing is delivered yet.
    fn join(&mut self, id: u32) {
        let group = self.bus.join(id, DAEMON_GROUP_NAME).expect("join");
        let fence = Fencing::new(
            id,
            self.opts,
            self.conf.clone(),
            &[1, 2, 3],
            (self.now, WALL + self.now),
        );
        let start = Start {
            our: id,
            quorum: QuorumView {
                quorate: self.quorate,
                quorate_since: 1,
                two_node: false,
            },
            ring_seq: 0,
            cluster_nodes: vec![1, 2, 3],
            at: at(self.now),
            embedded: true,
            helper: false,
            quorum_lockspace: false,
        };
        self.nodes.insert(
            id,
            Node {
                group,
                core: DaemonCore::new(start, fence, self.opts),
                agents: Vec::new(),
                running: BTreeMap::new(),
                cancelled: Vec::new(),
                kicked: Vec::new(),
                log: Vec::new(),
                captured: Captured::default(),
                negotiated: false,
            },
        );
    }

    /// Performs node `id`'s actions as the daemon's shell does.
    fn perform(&mut self, id: u32, actions: Vec<Action>) {
        let mut queue = std::collections::VecDeque::from(actions);
        while let Some(a) = queue.pop_front() {
            let Some(n) = self.nodes.get_mut(&id) else {
                return;
            };
            match a {
                Action::Send(bytes) => n.group.mcast(&bytes).expect("mcast"),
                Action::Kick(k) => n.kicked.push(k),
                Action::RunAgent {
                    nodeid,
                    agent,
                    stdin,
                    ..
                } => {
                    self.next_pid += 1;
                    let pid = self.next_pid;
                    n.agents.push((nodeid, agent, stdin, pid));
                    n.running.insert(nodeid, pid);
                    queue.extend(n.with(|c| c.handle_agent_started(nodeid, pid)));
                }
                Action::CancelAgent { nodeid, .. } => {
                    n.running.remove(&nodeid);
                    n.cancelled.push(nodeid);
                }
                Action::Exec { .. } => panic!("no runs here"),
                Action::Dropped => panic!("node {id} dropped a message"),
                Action::FenceReceived(_) => {}
                // no kernel here (the comms entries have their own test)
                Action::AddComms(_) | Action::DelComms(_) => {}
            }
        }
    }

    fn handle(&mut self, id: u32, e: Event) {
        let (now, quorate) = (at(self.now), self.quorate);
        let n = self.nodes.get_mut(&id).expect("node");
        n.quorum(now, quorate);
        let mut out = match e {
            Event::ConfChg {
                members,
                left,
                joined,
            } => {
                let cc = Confchg::of(&members, &left, &joined);
                n.with(|c| c.handle_confchg(now, &cc))
            }
            Event::Totem { ring, .. } => n.with(|c| c.handle_totem(now, ring.seq)),
            Event::Deliver {
                nodeid, payload, ..
            } => n.with(|c| c.handle_delivery(now, nodeid, &payload)),
        };
        // as the daemon's startup does once our protocol is negotiated
        if !n.negotiated && matches!(n.core.proto().negotiated(), Some(Ok(_))) {
            n.negotiated = true;
            out.extend(n.with(|c| c.handle_negotiated(now)));
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

    /// `secs` pass; every node runs its once-a-second timeout.
    fn tick(&mut self, secs: u64) {
        for _ in 0..secs {
            self.now += 1;
            let now = at(self.now);
            let ids: Vec<u32> = self.nodes.keys().copied().collect();
            for id in ids {
                let n = self.nodes.get_mut(&id).expect("node");
                n.quorum(now, self.quorate);
                let out = n.with(|c| c.handle_timeout(now));
                self.perform(id, out);
            }
            self.settle();
        }
    }

    /// The agent `node` runs for `subject` exits with `status`.
    fn agent_exits(&mut self, node: u32, subject: u32, status: i32) {
        let now = at(self.now);
        let n = self.nodes.get_mut(&node).expect("node");
        let pid = n.running.remove(&subject).expect("an agent runs");
        let out = n.with(|c| c.handle_agent_exit(now, subject, pid, status));
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

/// `update_cluster`: a node the quorum service adds gets its comms entries, one it drops
/// loses them, and the nodes the core started with already have theirs.
#[test]
fn the_comms_entries_follow_the_quorum_services_nodes() {
    let mut c = three(1, "");
    let n = c.nodes.get_mut(&1).expect("node 1");
    let (_, ring) = n.core.quorum();
    let mut quorum = |nodes: &[u32]| n.with(|c| c.handle_quorum(at(20), true, ring, nodes));
    assert_eq!(quorum(&[1, 2, 3]), vec![], "the startup nodes have theirs");
    assert_eq!(
        quorum(&[1, 3, 4]),
        vec![Action::AddComms(4), Action::DelComms(2)]
    );
    assert_eq!(quorum(&[1, 3, 4]), vec![], "nothing changed");
    assert_eq!(quorum(&[1, 2, 3, 4]), vec![Action::AddComms(2)]);
}

#[test]
fn all_start_together_startup_fencing_settles_without_fencing() {
    for seed in 1..=20 {
        let c = three(seed, "");
        for id in 1..=3 {
            let n = c.node(id);
            assert!(
                n.fence().startup_nodes().is_empty(),
                "seed {seed} node {id}"
            );
            assert!(!n.fence().fipu(), "seed {seed} node {id}: {:?}", n.log);
            assert_eq!(n.fence().in_progress(), InProgress::None);
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
            assert!(c.node(id).fence().needs_fencing(3), "seed {seed}");
            assert_eq!(c.node(id).fence().in_progress(), InProgress::NeedFencing);
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
        assert!(c.node(2).fence().needs_fencing(3));
        c.agent_exits(1, 3, 0);
        for id in [1, 2] {
            let n = c.node(id);
            assert!(!n.fence().needs_fencing(3), "seed {seed} node {id}");
            assert_eq!(n.fence().fence_time(3), Some(c.now));
            assert_eq!(n.fence().in_progress(), InProgress::None);
            let f = n.fence().nodes().find(|(i, _)| *i == 3).expect("node 3").1;
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
            .fence()
            .nodes()
            .any(|(i, n)| i == 3 && n.agent == AgentState::Delayed),
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
    assert!(c.node(2).fence().needs_fencing(3));
    assert!(c.node(2).agents.is_empty(), "{:?}", c.node(2).log);
    c.tick(1);
    assert_eq!(c.node(2).agents.len(), 1, "{:?}", c.node(2).log);
    assert_eq!(c.node(1).agents.len(), 1);
    c.agent_exits(2, 3, 2);
    // every actor failed: repeat_failed_fencing restores the list, node 1 tries again
    assert_eq!(c.node(1).agents.len(), 1, "not within the same second");
    c.tick(1);
    assert_eq!(c.node(1).agents.len(), 2, "{:?}", c.node(1).log);
    assert!(c.node(1).fence().needs_fencing(3));
    c.agent_exits(1, 3, 0);
    assert!(!c.node(2).fence().needs_fencing(3));
    let f = c
        .node(2)
        .fence()
        .nodes()
        .find(|(i, _)| *i == 3)
        .expect("3")
        .1;
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
    assert!(c.node(1).fence().needs_fencing(3), "still unfenced");
}

#[test]
fn fence_ack_cancels_the_running_agent_everywhere() {
    let mut c = three(11, "");
    c.tick(20);
    c.crash(3);
    assert_eq!(c.node(1).running.len(), 1);
    // the operator on node 2: dlm_tool fence_ack 3
    let now = at(c.now);
    let ack = c
        .nodes
        .get_mut(&2)
        .expect("2")
        .with(|n| n.handle_fence_ack(now, 3));
    let expect = FenceResult {
        flags: FenceFlags(0),
        nodeid: 3,
        result: RESULT_ACKED,
        fence_walltime: WALL + c.now,
    }
    .encode(MsgType::FENCE_RESULT, 2);
    assert_eq!(ack, vec![Action::Send(expect)]);
    c.perform(2, ack);
    c.settle();
    assert_eq!(c.node(1).cancelled, vec![3]);
    assert!(c.node(1).running.is_empty());
    for id in [1, 2] {
        assert!(!c.node(id).fence().needs_fencing(3));
        assert_eq!(c.node(id).fence().in_progress(), InProgress::None);
    }
    // a needless ack is refused by everyone, as C: "no need_fencing"
    let ack = c
        .nodes
        .get_mut(&2)
        .expect("2")
        .with(|n| n.handle_fence_ack(now, 1));
    c.perform(2, ack);
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
    assert!(c.node(2).fence().needs_fencing(3));
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
    assert!(!c.node(2).fence().needs_fencing(3));
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
    assert_eq!(c.node(1).fence().startup_nodes(), &[3]);
    assert_eq!(c.node(1).fence().in_progress(), InProgress::Unknown);
    c.tick(11);
    assert_eq!(c.node(1).agents.len(), 1, "{:?}", c.node(1).log);
    let (subject, _, stdin, _) = &c.node(1).agents[0];
    assert_eq!(*subject, 3);
    // fail_time is the cluster join time minus one
    assert_eq!(stdin, &format!("node=3\nfail_time={}\n", WALL + 100 - 1));
    assert!(
        c.node(2)
            .fence()
            .nodes()
            .any(|(i, n)| i == 3 && n.left_reason == dlm_controld::fencing::LeftReason::Startup)
    );
    c.agent_exits(1, 3, 0);
    for id in [1, 2] {
        assert!(!c.node(id).fence().fipu(), "{:?}", c.node(id).log);
        assert_eq!(c.node(id).fence().in_progress(), InProgress::None);
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
        assert!(!c.node(id).fence().needs_fencing(3), "node {id}");
    }
    // node 3 got CLEAR_STARTUP from node 1 when it joined, while its own fencing was
    // pending, and CLEAR_FIPU once that was settled: it may start lockspaces
    assert!(c.node(3).fence().startup_nodes().is_empty());
    assert!(!c.node(3).fence().fipu(), "{:?}", c.node(3).log);
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
                !c.node(id).fence().fipu(),
                "seed {seed} node {id}: {:?}",
                c.node(id).log
            );
        }
    }
}

/// Every surviving node agrees that `victim` is fenced, and nothing waits for fencing.
fn all_fenced(c: &Cluster, victim: u32, seed: u64) {
    for (id, n) in &c.nodes {
        assert!(
            !n.fence().needs_fencing(victim),
            "seed {seed}: node {id} still needs {victim} fenced: {:?}",
            n.log
        );
        assert!(n.core.facts().fenced.get(&victim).is_some_and(|&t| t > 0));
    }
}

/// Four nodes up for 20 s, then node 4 fails: node 1, the lowest, runs its agent.
fn node_4_failed(seed: u64) -> Cluster {
    let mut c = three(seed, "");
    c.start(4);
    c.tick(20);
    c.crash(4);
    assert_eq!(c.node(1).running.len(), 1, "seed {seed}");
    c
}

#[test]
fn the_fencer_crashing_mid_agent_hands_the_work_to_the_next_survivor() {
    for seed in 1..=200 {
        // node 1 dies with its agent for 4 running
        let mut c = node_4_failed(seed);
        c.crash(1);
        c.tick(1);
        // node 2 fences both: 1 (just failed) and 4 (never fenced), one agent at a time
        let mut fenced = Vec::new();
        for _ in 0..4 {
            let Some((&subject, _)) = c.node(2).running.iter().next() else {
                break;
            };
            assert!(c.node(3).running.is_empty(), "seed {seed}: node 3 defers");
            c.agent_exits(2, subject, 0);
            fenced.push(subject);
            c.tick(1);
        }
        fenced.sort_unstable();
        assert_eq!(fenced, vec![1, 4], "seed {seed}: {:?}", c.node(2).log);
        all_fenced(&c, 1, seed);
        all_fenced(&c, 4, seed);
    }
}

#[test]
fn a_fence_result_racing_a_confchg_is_applied_by_every_survivor() {
    for seed in 1..=200 {
        let mut c = node_4_failed(seed);
        // the agent succeeds; its FENCE_RESULT is multicast, and before anyone has it
        // node 3 fails: the bus orders the result and the confchg as it will
        let now = at(c.now);
        let n1 = c.nodes.get_mut(&1).expect("1");
        let pid = n1.running.remove(&4).expect("agent");
        let out = n1.with(|n| n.handle_agent_exit(now, 4, pid, 0));
        c.perform(1, out);
        c.crash(3);
        c.tick(1);
        all_fenced(&c, 4, seed);
        // 3 is fenced next, by node 1, whatever came first
        assert!(
            c.node(1).running.contains_key(&3),
            "seed {seed}: {:?}",
            c.node(1).log
        );
        c.agent_exits(1, 3, 0);
        c.tick(1);
        all_fenced(&c, 3, seed);
    }
}

#[test]
fn a_late_joiner_negotiates_and_is_not_fenced() {
    for seed in 1..=200 {
        // within post_join_delay no agent runs at all; after it node 3 is startup fenced,
        // and its clean join (a stateless member) ends the wait without a result
        for late in [5, 30] {
            let mut c = Cluster::new(seed, opts(), "");
            c.start(1);
            c.start(2);
            c.tick(late);
            c.start(3);
            c.tick(12);
            for (id, n) in &c.nodes {
                let what = format!("seed {seed} late {late} node {id}: {:?}", n.log);
                assert!(matches!(n.core.proto().negotiated(), Some(Ok(_))), "{what}");
                assert_eq!(n.agents.is_empty(), late < 10 || *id != 1, "{what}");
                assert!(!n.fence().needs_fencing(3), "{what}");
                assert_eq!(n.fence().in_progress(), InProgress::None, "{what}");
            }
        }
    }
}

#[test]
fn a_late_joiner_keeps_a_fence_clear_that_comes_before_its_protocol() {
    // without startup fencing an older member clears a new node's fipu as soon as the
    // daemon group shows the node (C does, before the node's PROTOCOL): the new node must
    // keep that FENCE_CLEAR until its protocol is negotiated, not drop it and wait for
    // fencing forever (seen on real kernels beside C 4.2.0)
    let opts = FenceOpts {
        startup: false,
        ..opts()
    };
    for seed in 1..=100 {
        let mut c = Cluster::new(seed, opts, "");
        c.start(1);
        c.tick(15);
        c.join(2);
        // node 1 speaks as C 4.2.0 does: the clear goes out before node 2's PROTOCOL
        let clear = FenceResult {
            flags: FenceFlags(FenceFlags::CLEAR_STARTUP | FenceFlags::CLEAR_FIPU),
            nodeid: 2,
            result: 0,
            fence_walltime: 0,
        };
        let bytes = clear.encode(MsgType::FENCE_CLEAR, 1);
        let n1 = c.nodes.get_mut(&1).expect("node 1");
        n1.group.mcast(&bytes).expect("mcast");
        c.settle();
        c.tick(5);
        for (id, n) in &c.nodes {
            let what = format!("seed {seed} node {id}: {:?}", n.log);
            assert!(matches!(n.core.proto().negotiated(), Some(Ok(_))), "{what}");
            assert_eq!(
                n.fence().in_progress(),
                InProgress::None,
                "fencing no longer unknown: {what}"
            );
            // (our node 1 sends its clear again once node 2's PROTOCOL comes; C does not)
            assert!(
                !n.log.iter().any(|l| l.contains("ignore")),
                "nothing dropped: {what}"
            );
        }
    }
}
