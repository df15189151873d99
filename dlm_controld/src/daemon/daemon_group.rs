//! The daemon group `dlm:controld` in the shell: it feeds the group's events to the
//! protocol and fencing machines, performs what they ask (multicasts, agents, kills,
//! log lines), and publishes the fencing facts the lockspaces wait on.

use std::collections::BTreeMap;

use dlm_cpg::Event;
use dlm_proto::wire::{Body, FenceFlags, FenceResult, Message, MsgType};
use tokio::sync::{mpsc, watch};

use super::agent::{self, AgentExit, RunExit};
use super::cluster::{CorosyncServices, LsGroup};
use super::query::SharedStatus;
use crate::clock::monotonic_secs;
use crate::daemon_proto::{self, DaemonProtocol, QuorumView};
use crate::fencing::{FenceEnv, Fencing, Out};
use crate::membership::FenceView;
use crate::run::{self, Runs};

/// What the lockspaces need to know about fencing (`fence_node_time`,
/// `fence_in_progress`) and about cluster membership (node add times).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FenceFacts {
    /// Fencing enabled: lockspaces wait for failed nodes to be fenced.
    pub(crate) enabled: bool,
    /// `enable_quorum_lockspace`: lockspace changes wait for quorum.
    pub(crate) quorum_lockspace: bool,
    /// Per daemon node, our monotonic time it was last fenced (0: never).
    pub(crate) fenced: BTreeMap<u32, u64>,
    /// Nodes whose time in `fenced` is a clean rejoin, not a fence.
    pub(crate) by_rejoin: std::collections::BTreeSet<u32>,
    /// Some fencing is pending anywhere (or unknown).
    pub(crate) in_progress: bool,
    /// Monotonic time each cluster node was last added by the quorum service.
    pub(crate) cluster_add: BTreeMap<u32, u64>,
}

impl FenceView for FenceFacts {
    fn fence_time(&self, nodeid: u32) -> Option<u64> {
        self.fenced.get(&nodeid).copied()
    }
    fn fenced_by_rejoin(&self, nodeid: u32) -> bool {
        self.by_rejoin.contains(&nodeid)
    }
    fn in_progress(&self) -> bool {
        self.in_progress
    }
    fn cluster_add_time(&self, nodeid: u32) -> u64 {
        self.cluster_add.get(&nodeid).copied().unwrap_or(0)
    }
}

/// Quorum as the fencing work sees it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Quorum {
    pub(crate) view: QuorumView,
    pub(crate) ring_seq: u64,
}

/// The daemon group, its two machines, and their outputs.
pub(crate) struct DaemonGroup {
    pub(crate) group: LsGroup,
    pub(crate) proto: DaemonProtocol,
    pub(crate) fencing: Fencing,
    our: u32,
    status: SharedStatus,
    facts: watch::Sender<FenceFacts>,
    exits: mpsc::UnboundedSender<AgentExit>,
    pub(crate) quorum: Quorum,
    /// The embedded group has no quorum service: its own ring stands for the cluster's.
    pub(crate) embedded: bool,
    /// Set by lockspace tasks when one starts: our PROTOCOL then says STATEFUL.
    pub(crate) stateful: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// `dlm_tool run` commands (`enable_helper`).
    pub(crate) runs: Runs,
    pub(crate) helper: bool,
    run_exits: Option<mpsc::UnboundedSender<RunExit>>,
}

impl DaemonGroup {
    pub(crate) fn new(
        group: LsGroup,
        our: u32,
        fencing: Fencing,
        status: SharedStatus,
        facts: watch::Sender<FenceFacts>,
        exits: mpsc::UnboundedSender<AgentExit>,
    ) -> Self {
        Self {
            group,
            proto: DaemonProtocol::new(our),
            fencing,
            our,
            status,
            facts,
            exits,
            quorum: Quorum::default(),
            embedded: false,
            stateful: std::sync::Arc::default(),
            runs: Runs::new(our),
            helper: false,
            run_exits: None,
        }
    }

    fn env(&self) -> FenceEnv {
        FenceEnv {
            now: monotonic_secs(),
            wall: super::wall_secs(),
            quorate: self.quorum.view.quorate,
            cluster_ring_seq: self.quorum.ring_seq,
        }
    }

    /// One event of the daemon group.
    pub(crate) fn event(&mut self, ev: Event, services: Option<&CorosyncServices>) {
        if self.stateful.load(std::sync::atomic::Ordering::Relaxed) {
            self.proto.set_stateful();
        }
        let env = self.env();
        let out = match ev {
            Event::ConfChg {
                members,
                left,
                joined,
            } => {
                if let Ok(mut st) = self.status.lock() {
                    st.member_count = members.len();
                    st.joined_count = joined.len();
                    st.remove_count = left.len();
                }
                let members: Vec<u32> = members.iter().map(|m| m.nodeid).collect();
                let left: Vec<(u32, u32)> =
                    left.iter().map(|m| (m.nodeid, m.reason.to_raw())).collect();
                let joined: Vec<u32> = joined.iter().map(|m| m.nodeid).collect();
                let gone: Vec<u32> = left.iter().map(|l| l.0).collect();
                crate::log::log_config("dlm:controld", &members, &joined, &gone);
                let po = self.proto.handle_confchg(env.now, &members, &left, &joined);
                let failed = self.proto_out(po, services);
                self.fencing
                    .handle_confchg(env, &self.proto, &members, &left, &joined, &failed)
            }
            Event::Deliver {
                nodeid, payload, ..
            } => self.deliver(env, nodeid, &payload, services),
            Event::Totem { ring, .. } => {
                let env = if self.embedded {
                    FenceEnv {
                        cluster_ring_seq: ring.seq,
                        ..env
                    }
                } else {
                    env
                };
                if let Ok(mut st) = self.status.lock() {
                    st.daemon_ringid = ring.seq;
                }
                tracing::debug!("dlm:controld ring {}:{}", ring.nodeid, ring.seq);
                if self.embedded {
                    self.quorum.ring_seq = ring.seq;
                }
                self.fencing.handle_totem(env, &self.proto, ring.seq)
            }
        };
        self.perform(out, services);
    }

    fn deliver(
        &mut self,
        env: FenceEnv,
        from: u32,
        payload: &[u8],
        services: Option<&CorosyncServices>,
    ) -> Vec<Out> {
        let msg = match Message::decode(payload) {
            Ok(m) => m,
            Err(e) => {
                crate::metrics::get().daemon_dropped.inc();
                tracing::error!("dlm:controld: dropped a message from node {from}: {e}");
                return Vec::new();
            }
        };
        if msg.header.nodeid != from {
            crate::metrics::get().daemon_dropped.inc();
            tracing::error!(
                "dlm:controld: dropped a message from node {from} that names node {}",
                msg.header.nodeid
            );
            return Vec::new();
        }
        if !matches!(msg.body, Body::Protocol(_)) && !self.fencing.allowed() {
            tracing::debug!(
                "deliver_cb_daemon ignore non proto msg {}",
                msg.header.msg_type.0
            );
            return Vec::new();
        }
        match msg.body {
            Body::Protocol(p) => {
                let needs = self.fencing.needs_fencing(from);
                let po = self
                    .proto
                    .handle_protocol(from, &p, self.quorum.view, needs);
                self.proto_out(po, services);
                self.fencing.work(env, &self.proto)
            }
            Body::FenceResult(f) => {
                let outcome = match f.result {
                    0 => "fenced",
                    crate::fencing::RESULT_ACKED => "acknowledged",
                    _ => "failed",
                };
                crate::metrics::get()
                    .fence_received
                    .with_label_values(&[outcome])
                    .inc();
                self.fencing.receive_result(
                    env,
                    &self.proto,
                    from,
                    f.nodeid,
                    f.result,
                    f.fence_walltime,
                )
            }
            Body::FenceClear(f) => {
                self.fencing
                    .receive_clear(env, &self.proto, from, f.nodeid, f.result, f.flags.0)
            }
            Body::RunRequest(r) => {
                if self.helper {
                    let o = self.runs.receive_request(from, &r);
                    self.run_out(o);
                } else {
                    tracing::debug!("receive_run_request from {from} helper not enabled");
                }
                self.fencing.work(env, &self.proto)
            }
            Body::RunReply(r) => {
                if self.helper {
                    let o = self.runs.receive_reply(from, &r);
                    self.run_out(o);
                }
                self.fencing.work(env, &self.proto)
            }
            _ => {
                crate::metrics::get().daemon_dropped.inc();
                tracing::error!(
                    "deliver_cb_daemon unknown msg type {} from {from}",
                    msg.header.msg_type.0
                );
                Vec::new()
            }
        }
    }

    /// Performs the protocol machine's outputs; returns the nodes it reported failed.
    fn proto_out(
        &mut self,
        out: Vec<daemon_proto::Out>,
        services: Option<&CorosyncServices>,
    ) -> Vec<(u32, u32)> {
        let mut failed = Vec::new();
        for o in out {
            match o {
                daemon_proto::Out::SendProtocol(p) => self.send(&p.encode(self.our)),
                daemon_proto::Out::Kick(n) => kick(services, n),
                daemon_proto::Out::Failed { nodeid, reason } => failed.push((nodeid, reason)),
            }
        }
        failed
    }

    /// Multicasts behind whatever corosync pushed back earlier (`mcast` queues it then).
    fn send(&mut self, bytes: &[u8]) {
        if let Err(e) = self.group.mcast(bytes) {
            tracing::error!("dlm:controld: multicast: {e}");
        }
    }

    /// Whether messages wait for corosync to take them (see [`Self::flush`]).
    pub(crate) fn backlog(&mut self) -> bool {
        self.group.queued() > 0
    }

    /// Sends what corosync pushed back (TRY_AGAIN), in order; the main loop calls it while
    /// [`Self::backlog`] holds — a FENCE_RESULT left in the queue would keep every
    /// lockspace of the cluster waiting for fencing.
    pub(crate) fn flush(&mut self) {
        if let Err(e) = self.group.try_flush() {
            tracing::error!("dlm:controld: multicast: {e}");
        }
    }

    fn fence_msg(&mut self, t: MsgType, nodeid: u32, result: i32, flags: u32, walltime: u64) {
        let m = FenceResult {
            flags: FenceFlags(flags),
            nodeid,
            result,
            fence_walltime: walltime,
        };
        let bytes = m.encode(t, self.our);
        self.send(&bytes);
    }

    /// Performs the fencing machine's outputs, then publishes the new facts.
    fn perform(&mut self, out: Vec<Out>, services: Option<&CorosyncServices>) {
        let mut queue = std::collections::VecDeque::from(out);
        while let Some(o) = queue.pop_front() {
            match o {
                Out::RunAgent {
                    nodeid,
                    agent,
                    stdin,
                    device,
                } => {
                    let pid = agent::spawn(&agent, stdin, nodeid, self.exits.clone());
                    crate::metrics::get()
                        .fence_attempts
                        .with_label_values(&[&device])
                        .inc();
                    let more = self.fencing.agent_started(nodeid, pid);
                    queue.extend(more);
                }
                Out::CancelAgent { nodeid, pid } => agent::cancel(nodeid, pid),
                Out::SendResult {
                    nodeid,
                    result,
                    walltime,
                } => self.fence_msg(MsgType::FENCE_RESULT, nodeid, result, 0, walltime),
                Out::SendClear {
                    nodeid,
                    result,
                    flags,
                } => self.fence_msg(MsgType::FENCE_CLEAR, nodeid, result, flags, 0),
                Out::Kick(n) => kick(services, n),
                Out::KickMerged(n) => {
                    kick(services, n);
                    self.proto.mark_killed(n);
                }
                Out::Log(true, line) => tracing::error!("{line}"),
                Out::Log(false, line) => tracing::debug!("{line}"),
            }
        }
        self.publish();
    }

    fn publish(&mut self) {
        if let Ok(mut st) = self.status.lock() {
            st.update(&self.proto, &self.fencing);
        }
        let fenced: BTreeMap<u32, u64> = self
            .fencing
            .nodes()
            .map(|(id, n)| (id, n.fence_monotime))
            .collect();
        let by_rejoin: std::collections::BTreeSet<u32> = self
            .fencing
            .nodes()
            .filter(|(_, n)| n.fenced_by_rejoin)
            .map(|(id, _)| id)
            .collect();
        let in_progress = self.fencing.in_progress() != 0;
        let need = self.fencing.nodes().filter(|(_, n)| n.need_fencing).count();
        crate::metrics::get()
            .need_fencing
            .set(i64::try_from(need).unwrap_or(i64::MAX));
        self.facts.send_if_modified(|f| {
            let changed =
                f.fenced != fenced || f.by_rejoin != by_rejoin || f.in_progress != in_progress;
            f.fenced = fenced;
            f.by_rejoin = by_rejoin;
            f.in_progress = in_progress;
            changed
        });
    }

    /// Enables `dlm_tool run`: commands' exits arrive on `exits`.
    pub(crate) fn enable_runs(&mut self, exits: mpsc::UnboundedSender<RunExit>) {
        self.helper = true;
        self.run_exits = Some(exits);
    }

    fn daemon_version(&self) -> dlm_proto::wire::Version3 {
        match self.proto.negotiated() {
            Some(Ok((d, _))) => d,
            _ => dlm_proto::wire::DAEMON_PROTOCOL,
        }
    }

    /// Performs what the run table asks, and republishes the run list.
    fn run_out(&mut self, out: Vec<run::Out>) {
        for o in out {
            match o {
                run::Out::Send(b) => self.send(&b),
                run::Out::Exec { uuid, command } => {
                    if let Some(tx) = &self.run_exits {
                        agent::run_command(uuid, &command, tx.clone());
                    }
                }
                run::Out::Log(true, l) => tracing::error!("{l}"),
                run::Out::Log(false, l) => tracing::debug!("{l}"),
            }
        }
        if let Ok(mut st) = self.status.lock() {
            st.run_list = self.runs.list_text();
        }
    }

    /// `dlm_tool run`: (rv, uuid).
    pub(crate) fn run_start(&mut self, dest: i32, flags: u32, command: &[u8]) -> (i32, String) {
        if !self.helper {
            tracing::debug!("ignore start_run helper not enabled");
            return (-1, String::new());
        }
        let uuid = agent::new_uuid();
        let members = self.proto.members().to_vec();
        let v = self.daemon_version();
        let (rv, out) = self
            .runs
            .start(v, &members, dest, flags, command, uuid.clone());
        self.run_out(out);
        (rv, if rv == 0 { uuid } else { String::new() })
    }

    /// `dlm_tool run_check`: (rv, status).
    pub(crate) fn run_check(&mut self, uuid: &str, flags: u32) -> (i32, u32) {
        if !self.helper {
            tracing::debug!("ignore check_run helper not enabled");
            return (-1, 0);
        }
        let (st, out) = self.runs.check(uuid, flags);
        self.run_out(out);
        st.map_or((-1, 0), |s| (0, s))
    }

    /// A command of a run ended here.
    pub(crate) fn run_exit(&mut self, e: RunExit) {
        let v = self.daemon_version();
        let out = self.runs.local_result(v, &e.uuid, e.pid, e.result);
        self.run_out(out);
    }

    /// New cluster nodes from the quorum service, at `now`.
    pub(crate) fn cluster_nodes_added(&mut self, nodes: &[u32], now: u64) {
        if nodes.is_empty() {
            return;
        }
        self.fencing.cluster_nodes_added(now);
        self.facts.send_if_modified(|f| {
            for &n in nodes {
                f.cluster_add.insert(n, now);
            }
            true
        });
    }

    /// Options changed at run time (`reload_config`, `set_config`): the fencing ones that
    /// C re-reads, and `enable_quorum_lockspace`.
    pub(crate) fn reconfigure(&mut self, o: &crate::config::Options) {
        use crate::config::Opt;
        self.fencing
            .reconfigure(crate::fencing::FenceOpts::from_options(o, false));
        let q = o.on(Opt::EnableQuorumLockspace);
        self.facts.send_if_modified(|f| {
            let changed = f.quorum_lockspace != q;
            f.quorum_lockspace = q;
            changed
        });
    }

    /// Runs the fence work now.
    pub(crate) fn tick_now(&mut self, services: Option<&CorosyncServices>) {
        let out = self.fencing.work(self.env(), &self.proto);
        self.perform(out, services);
    }

    /// The once-a-second retry (`retry_fencing`).
    pub(crate) fn tick(&mut self, services: Option<&CorosyncServices>) {
        if self.fencing.retry() {
            let out = self.fencing.work(self.env(), &self.proto);
            self.perform(out, services);
        }
    }

    /// An agent ended.
    pub(crate) fn agent_exit(&mut self, e: AgentExit, services: Option<&CorosyncServices>) {
        let result = if e.result == 0 { "success" } else { "failure" };
        crate::metrics::get()
            .fence_results
            .with_label_values(&[result])
            .inc();
        let out = self
            .fencing
            .agent_exited(self.env(), &self.proto, e.nodeid, e.pid, e.result);
        self.perform(out, services);
    }

    /// `dlm_tool fence_ack <nodeid>`.
    pub(crate) fn fence_ack(&mut self, nodeid: u32, services: Option<&CorosyncServices>) {
        tracing::error!("fence_ack {nodeid}");
        let o = self.fencing.fence_ack(self.env(), nodeid);
        self.perform(vec![o], services);
    }
}

/// `kick_node_from_cluster`: corosync removes the node.
pub(crate) fn kick(services: Option<&CorosyncServices>, nodeid: u32) {
    tracing::error!("tell corosync to remove nodeid {nodeid} from cluster");
    if let Some(s) = services {
        if let Err(e) = s.cfg.kill_node(nodeid, "dlm_controld") {
            tracing::error!("kill node {nodeid}: {e}");
        }
    }
}
