//! The daemon group `dlm:controld` without I/O, in the manner of quinn-proto's `Endpoint`:
//! the protocol machine, fencing, `dlm_tool run` and the quorum view behind `handle_*`
//! inputs (a delivery, a configuration change, a totem ring, a quorum change, an agent's
//! start and exit, `fence_ack`, a configuration reload, the once-a-second timeout) that
//! return [`Action`]s. No clock (the caller passes [`Now`]), no spawning, no sockets; the
//! shell (`daemon/daemon_group.rs`) performs the actions, and the fencing simulation drives
//! this same core. Log lines go through `tracing`.

use std::collections::{BTreeMap, BTreeSet};

use dlm_proto::wire::{Body, FenceFlags, FenceResult, Message, MsgType, Version3};

use crate::confchg::Confchg;
use crate::daemon_proto::{self, DaemonProtocol, QuorumView};
use crate::fencing::{self, FenceEnv, FenceOpts, Fencing};
use crate::membership::FenceView;
use crate::run::{self, Runs};

/// The time of an input: monotonic and wall-clock seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic seconds.
    pub mono: u64,
    /// Wall-clock seconds (fence results carry them).
    pub wall: u64,
}

/// What the shell must do for the daemon group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Multicast these bytes on the daemon group.
    Send(Vec<u8>),
    /// Ask corosync to remove this node from the cluster (`kick_node_from_cluster`).
    Kick(u32),
    /// A node joined the cluster: write its comms entries, one per address
    /// (`add_configfs_node`).
    AddComms(u32),
    /// A node left the cluster: remove its comms entry (`del_configfs_node`).
    DelComms(u32),
    /// Start a fence agent (PATH lookup, no arguments) with `stdin`; report its pid with
    /// [`DaemonCore::handle_agent_started`] and its end with
    /// [`DaemonCore::handle_agent_exit`].
    RunAgent {
        /// The node to fence.
        nodeid: u32,
        /// Program.
        agent: String,
        /// Its whole stdin.
        stdin: String,
        /// Device name (metrics, log).
        device: String,
    },
    /// Kill the agent running for a node and reap it; no result is sent.
    CancelAgent {
        /// The node it was fencing.
        nodeid: u32,
        /// Its process id.
        pid: u32,
    },
    /// Run a `dlm_tool run` command here; report with [`DaemonCore::handle_run_exit`].
    Exec {
        /// The run.
        uuid: String,
        /// Its command line.
        command: String,
    },
    /// A delivery was dropped (bad bytes, a sender that lies, an unknown type): counted.
    Dropped,
    /// A FENCE_RESULT arrived: "fenced", "acknowledged" or "failed" (counted).
    FenceReceived(&'static str),
}

/// What the lockspaces need to know about fencing (`fence_node_time`,
/// `fence_in_progress`) and about cluster membership (node add times).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FenceFacts {
    /// Fencing enabled: lockspaces wait for failed nodes to be fenced.
    pub enabled: bool,
    /// `enable_quorum_lockspace`: lockspace changes wait for quorum.
    pub quorum_lockspace: bool,
    /// Per daemon node, our monotonic time it was last fenced (0: never).
    pub fenced: BTreeMap<u32, u64>,
    /// Nodes whose time in `fenced` is a clean rejoin, not a fence.
    pub by_rejoin: BTreeSet<u32>,
    /// Some fencing is pending anywhere (or unknown).
    pub in_progress: bool,
    /// Monotonic time each cluster node was last added by the quorum service.
    pub cluster_add: BTreeMap<u32, u64>,
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

/// How the core starts: the first quorum notification and the options.
#[derive(Debug, Clone)]
pub struct Start {
    /// Our node id.
    pub our: u32,
    /// Quorum at startup, and since when (monotonic seconds).
    pub quorum: QuorumView,
    /// The quorum service's ring.
    pub ring_seq: u64,
    /// The cluster's nodes at startup (their add time is `at`).
    pub cluster_nodes: Vec<u32>,
    /// When the cluster was first seen.
    pub at: Now,
    /// No quorum service: the daemon group's own ring stands for the cluster's.
    pub embedded: bool,
    /// `enable_helper`: `dlm_tool run` commands are accepted.
    pub helper: bool,
    /// `enable_quorum_lockspace`.
    pub quorum_lockspace: bool,
}

/// The daemon group's machines and the views they decide from.
#[derive(Debug)]
pub struct DaemonCore {
    our: u32,
    proto: DaemonProtocol,
    fencing: Fencing,
    runs: Runs,
    helper: bool,
    embedded: bool,
    quorum: QuorumView,
    ring_seq: u64,
    /// The quorum service's nodes as last seen, and when each was added.
    cluster_nodes: BTreeSet<u32>,
    cluster_add: BTreeMap<u32, u64>,
    quorum_lockspace: bool,
    fencing_enabled: bool,
    /// Messages other than PROTOCOL delivered before our protocol was negotiated, applied
    /// once it is (at most [`EARLY_MAX`]).
    early: std::collections::VecDeque<(u32, Vec<u8>)>,
}

/// Daemon-group messages kept from before our protocol is negotiated. An older member's
/// FENCE_CLEAR for a new node may come first (C sends it when the group shows the node,
/// before the node's PROTOCOL); dropped, the new node would wait for fencing forever.
pub const EARLY_MAX: usize = 256;

impl DaemonCore {
    /// A daemon about to join the group, fencing by `fencing`.
    pub fn new(start: Start, fencing: Fencing, fence_opts: FenceOpts) -> Self {
        Self {
            our: start.our,
            proto: DaemonProtocol::new(start.our),
            fencing,
            runs: Runs::new(start.our),
            helper: start.helper,
            embedded: start.embedded,
            quorum: start.quorum,
            ring_seq: start.ring_seq,
            cluster_nodes: start.cluster_nodes.iter().copied().collect(),
            cluster_add: start
                .cluster_nodes
                .iter()
                .map(|&n| (n, start.at.mono))
                .collect(),
            quorum_lockspace: start.quorum_lockspace,
            early: std::collections::VecDeque::new(),
            fencing_enabled: fence_opts.enabled,
        }
    }

    /// The protocol machine (status, negotiation).
    pub fn proto(&self) -> &DaemonProtocol {
        &self.proto
    }

    /// The fencing machine (status).
    pub fn fencing(&self) -> &Fencing {
        &self.fencing
    }

    /// The runs (`dlm_tool run_list`).
    pub fn runs(&self) -> &Runs {
        &self.runs
    }

    /// Quorum as the core sees it.
    pub fn quorum(&self) -> (QuorumView, u64) {
        (self.quorum, self.ring_seq)
    }

    /// A lockspace started here: our PROTOCOL says STATEFUL from now on.
    pub fn set_stateful(&mut self) {
        self.proto.set_stateful();
    }

    /// The facts lockspaces wait on.
    pub fn facts(&self) -> FenceFacts {
        FenceFacts {
            enabled: self.fencing_enabled,
            quorum_lockspace: self.quorum_lockspace,
            fenced: self
                .fencing
                .nodes()
                .map(|(id, n)| (id, n.fence_monotime))
                .collect(),
            by_rejoin: self
                .fencing
                .nodes()
                .filter(|(_, n)| n.fenced_by_rejoin)
                .map(|(id, _)| id)
                .collect(),
            in_progress: self.fencing.in_progress().any(),
            cluster_add: self.cluster_add.clone(),
        }
    }

    /// Nodes that must be fenced now (a gauge).
    pub fn need_fencing(&self) -> usize {
        self.fencing.nodes().filter(|(_, n)| n.need_fencing).count()
    }

    fn env(&self, now: Now) -> FenceEnv {
        FenceEnv {
            now: now.mono,
            wall: now.wall,
            quorate: self.quorum.quorate,
            cluster_ring_seq: self.ring_seq,
        }
    }

    /// A configuration change of the daemon group (`confchg_cb_daemon`).
    pub fn handle_confchg(&mut self, now: Now, cc: &Confchg) -> Vec<Action> {
        let mut out = Vec::new();
        let po = self.proto.handle_confchg(now.mono, cc);
        let failed = self.proto_out(po, &mut out);
        let fo = self
            .fencing
            .handle_confchg(self.env(now), &self.proto, cc, &failed);
        self.fence_out(fo, &mut out);
        out
    }

    /// A totem ring of the daemon group; without a quorum service it is the cluster's.
    pub fn handle_totem(&mut self, now: Now, ring_seq: u64) -> Vec<Action> {
        if self.embedded {
            self.ring_seq = ring_seq;
        }
        let mut out = Vec::new();
        let fo = self
            .fencing
            .handle_totem(self.env(now), &self.proto, ring_seq);
        self.fence_out(fo, &mut out);
        out
    }

    /// The quorum service's notification (`quorum_callback`): quorum, its ring, and the
    /// cluster's nodes (new ones get their add time, which lockspaces compare with a failed
    /// node's); the comms entries follow the nodes (`update_cluster`). The nodes at
    /// [`Start`] already have theirs.
    pub fn handle_quorum(
        &mut self,
        now: Now,
        quorate: bool,
        ring_seq: u64,
        nodes: &[u32],
    ) -> Vec<Action> {
        if quorate && !self.quorum.quorate {
            self.quorum.quorate_since = now.mono;
        }
        self.quorum.quorate = quorate;
        self.ring_seq = ring_seq;
        let added: Vec<u32> = nodes
            .iter()
            .copied()
            .filter(|n| !self.cluster_nodes.contains(n))
            .collect();
        for n in &added {
            tracing::debug!("cluster node {n} added seq {ring_seq}");
            self.cluster_add.insert(*n, now.mono);
        }
        if !added.is_empty() {
            self.fencing.cluster_nodes_added(now.mono);
        }
        let now_nodes: BTreeSet<u32> = nodes.iter().copied().collect();
        let removed = self.cluster_nodes.difference(&now_nodes).copied();
        let mut out: Vec<Action> = added.into_iter().map(Action::AddComms).collect();
        out.extend(removed.map(Action::DelComms));
        self.cluster_nodes = now_nodes;
        out
    }

    /// A message delivered on the daemon group (`deliver_cb_daemon`): decoded, its sender
    /// checked, and — until our protocol is negotiated — only PROTOCOL accepted.
    pub fn handle_delivery(&mut self, now: Now, from: u32, payload: &[u8]) -> Vec<Action> {
        let msg = match Message::decode(payload) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!("dlm:controld: dropped a message from node {from}: {e}");
                return vec![Action::Dropped];
            }
        };
        if msg.header.nodeid != from {
            tracing::error!(
                "dlm:controld: dropped a message from node {from} that names node {}",
                msg.header.nodeid
            );
            return vec![Action::Dropped];
        }
        if !matches!(msg.body, Body::Protocol(_)) && !self.fencing.allowed() {
            // C drops these ("don't think this will happen"); it does, beside C
            if self.early.len() < EARLY_MAX {
                tracing::debug!(
                    "deliver_cb_daemon save msg {} from {from} until the protocol is set",
                    msg.header.msg_type.0
                );
                self.early.push_back((from, payload.to_vec()));
            } else {
                tracing::error!(
                    "deliver_cb_daemon dropped msg {} from {from}: {EARLY_MAX} kept already",
                    msg.header.msg_type.0
                );
            }
            return Vec::new();
        }
        let mut out = Vec::new();
        let fo = self.deliver_body(now, from, msg.header.msg_type, msg.body, &mut out);
        self.fence_out(fo, &mut out);
        out
    }

    fn deliver_body(
        &mut self,
        now: Now,
        from: u32,
        msg_type: MsgType,
        body: Body<'_>,
        out: &mut Vec<Action>,
    ) -> Vec<fencing::Action> {
        let env = self.env(now);
        match body {
            Body::Protocol(p) => {
                let needs = self.fencing.needs_fencing(from);
                let po = self.proto.handle_protocol(from, &p, self.quorum, needs);
                self.proto_out(po, out);
                self.fencing.work(env, &self.proto)
            }
            Body::FenceResult(f) => {
                out.push(Action::FenceReceived(match f.result {
                    0 => "fenced",
                    fencing::RESULT_ACKED => "acknowledged",
                    _ => "failed",
                }));
                let (nodeid, result, wall) = (f.nodeid, f.result, f.fence_walltime);
                self.fencing
                    .receive_result(env, &self.proto, from, nodeid, result, wall)
            }
            Body::FenceClear(f) => {
                self.fencing
                    .receive_clear(env, &self.proto, from, f.nodeid, f.result, f.flags.0)
            }
            Body::RunRequest(r) => {
                if self.helper {
                    let o = self.runs.receive_request(from, &r);
                    run_out(o, out);
                } else {
                    tracing::debug!("receive_run_request from {from} helper not enabled");
                }
                self.fencing.work(env, &self.proto)
            }
            Body::RunReply(r) => {
                if self.helper {
                    let o = self.runs.receive_reply(from, &r);
                    run_out(o, out);
                }
                self.fencing.work(env, &self.proto)
            }
            _ => {
                tracing::error!(
                    "deliver_cb_daemon unknown msg type {} from {from}",
                    msg_type.0
                );
                out.push(Action::Dropped);
                Vec::new()
            }
        }
    }

    /// Our protocol is negotiated: fencing work may begin (`daemon_fence_allow`).
    pub fn handle_negotiated(&mut self, now: Now) -> Vec<Action> {
        self.fencing.allow();
        let mut out = Vec::new();
        for (from, payload) in std::mem::take(&mut self.early) {
            out.extend(self.handle_delivery(now, from, &payload));
        }
        out.extend(self.handle_fence_work(now));
        out
    }

    /// Runs the fence work now.
    pub fn handle_fence_work(&mut self, now: Now) -> Vec<Action> {
        let mut out = Vec::new();
        let fo = self.fencing.work(self.env(now), &self.proto);
        self.fence_out(fo, &mut out);
        out
    }

    /// The once-a-second timeout (`retry_fencing`).
    pub fn handle_timeout(&mut self, now: Now) -> Vec<Action> {
        if self.fencing.retry() {
            self.handle_fence_work(now)
        } else {
            Vec::new()
        }
    }

    /// The agent started for `nodeid` runs as `pid`.
    pub fn handle_agent_started(&mut self, nodeid: u32, pid: u32) -> Vec<Action> {
        let mut out = Vec::new();
        let fo = self.fencing.agent_started(nodeid, pid);
        self.fence_out(fo, &mut out);
        out
    }

    /// The agent `pid` for `nodeid` ended with `status` (0 success).
    pub fn handle_agent_exit(
        &mut self,
        now: Now,
        nodeid: u32,
        pid: u32,
        status: i32,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let fo = self
            .fencing
            .agent_exited(self.env(now), &self.proto, nodeid, pid, status);
        self.fence_out(fo, &mut out);
        out
    }

    /// `dlm_tool fence_ack <nodeid>`.
    pub fn handle_fence_ack(&mut self, now: Now, nodeid: u32) -> Vec<Action> {
        tracing::error!("fence_ack {nodeid}");
        let mut out = Vec::new();
        let o = self.fencing.fence_ack(self.env(now), nodeid);
        self.fence_out(vec![o], &mut out);
        out
    }

    /// Options changed at run time (`reload_config`, `set_config`): the fencing ones C
    /// re-reads, and `enable_quorum_lockspace`.
    pub fn handle_config(&mut self, opts: FenceOpts, quorum_lockspace: bool) {
        self.fencing.reconfigure(opts);
        self.quorum_lockspace = quorum_lockspace;
    }

    /// `dlm_tool run`: (rv, uuid) for a run named `uuid` (the shell draws it).
    pub fn run_start(
        &mut self,
        dest: i32,
        flags: u32,
        command: &[u8],
        uuid: String,
    ) -> ((i32, String), Vec<Action>) {
        if !self.helper {
            tracing::debug!("ignore start_run helper not enabled");
            return ((-1, String::new()), Vec::new());
        }
        let members = self.proto.members().to_vec();
        let v = self.daemon_version();
        let (rv, o) = self
            .runs
            .start(v, &members, dest, flags, command, uuid.clone());
        let mut out = Vec::new();
        run_out(o, &mut out);
        ((rv, if rv == 0 { uuid } else { String::new() }), out)
    }

    /// `dlm_tool run_check`: (rv, status).
    pub fn run_check(&mut self, uuid: &str, flags: u32) -> (i32, u32) {
        if !self.helper {
            tracing::debug!("ignore check_run helper not enabled");
            return (-1, 0);
        }
        self.runs.check(uuid, flags).map_or((-1, 0), |s| (0, s))
    }

    /// A command of a run ended here.
    pub fn handle_run_exit(&mut self, uuid: &str, pid: i32, result: i32) -> Vec<Action> {
        let v = self.daemon_version();
        let mut out = Vec::new();
        run_out(self.runs.local_result(v, uuid, pid, result), &mut out);
        out
    }

    fn daemon_version(&self) -> Version3 {
        match self.proto.negotiated() {
            Some(Ok((d, _))) => d,
            _ => dlm_proto::wire::DAEMON_PROTOCOL,
        }
    }

    /// The protocol machine's outputs; returns the nodes it reported failed.
    fn proto_out(
        &self,
        po: Vec<daemon_proto::Action>,
        out: &mut Vec<Action>,
    ) -> Vec<(u32, dlm_cpg::Reason)> {
        let mut failed = Vec::new();
        for o in po {
            match o {
                daemon_proto::Action::SendProtocol(p) => {
                    out.push(Action::Send(p.encode(self.our).to_vec()))
                }
                daemon_proto::Action::Kick(n) => out.push(Action::Kick(n)),
                daemon_proto::Action::Failed { nodeid, reason } => failed.push((nodeid, reason)),
            }
        }
        failed
    }

    /// The fencing machine's outputs as actions (a merged member asked to leave is
    /// marked so it is asked once).
    fn fence_out(&mut self, fo: Vec<fencing::Action>, out: &mut Vec<Action>) {
        for o in fo {
            match o {
                fencing::Action::RunAgent {
                    nodeid,
                    agent,
                    stdin,
                    device,
                } => out.push(Action::RunAgent {
                    nodeid,
                    agent,
                    stdin,
                    device,
                }),
                fencing::Action::CancelAgent { nodeid, pid } => {
                    out.push(Action::CancelAgent { nodeid, pid })
                }
                fencing::Action::SendResult {
                    nodeid,
                    result,
                    walltime,
                } => out.push(self.fence_msg(MsgType::FENCE_RESULT, nodeid, result, 0, walltime)),
                fencing::Action::SendClear {
                    nodeid,
                    result,
                    flags,
                } => out.push(self.fence_msg(MsgType::FENCE_CLEAR, nodeid, result, flags, 0)),
                fencing::Action::Kick(n) => out.push(Action::Kick(n)),
                fencing::Action::KickMerged(n) => {
                    self.proto.mark_killed(n);
                    out.push(Action::Kick(n));
                }
            }
        }
    }

    fn fence_msg(&self, t: MsgType, nodeid: u32, result: i32, flags: u32, walltime: u64) -> Action {
        let m = FenceResult {
            flags: FenceFlags(flags),
            nodeid,
            result,
            fence_walltime: walltime,
        };
        Action::Send(m.encode(t, self.our))
    }
}

fn run_out(ro: Vec<run::Action>, out: &mut Vec<Action>) {
    for o in ro {
        match o {
            run::Action::Send(b) => out.push(Action::Send(b)),
            run::Action::Exec { uuid, command } => out.push(Action::Exec { uuid, command }),
        }
    }
}
