//! Fencing of failed daemon nodes (daemon_cpg.c `daemon_fence_work`, `receive_fence_result`,
//! `receive_fence_clear`, the fence part of `confchg_cb_daemon`; fence_config.c), sans I/O.
//!
//! A daemon member that had joined cleanly and left by NODEDOWN or PROCDOWN needs fencing.
//! The lowest surviving member that saw it fail (its *actor*) runs the node's fence
//! devices one after another; the outcome goes to every daemon as FENCE_RESULT, and every
//! lockspace that lost the node waits until the node's fence time is after its failure.
//! At startup, configured nodes that never join the daemon group within `post_join_delay`
//! are fenced too (startup fencing), and a new daemon starts no lockspace until the older
//! members tell it (FENCE_CLEAR) that no fencing is pending ("fence in progress unknown").
//!
//! Time comes in as arguments; agents, messages, kills and log lines go out as [`Action`].

use std::collections::{BTreeMap, BTreeSet};

use dlm_cpg::Reason;
use dlm_proto::wire::FenceFlags;

use crate::confchg::Confchg;
use crate::config::{ConfFile, FenceMethod};
use crate::daemon_proto::DaemonProtocol;

/// Why a node is to be fenced: it left the daemon group (a CPG reason), or C's
/// `REASON_STARTUP_FENCING`; unknown until it has done either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeftReason {
    /// Not known (the node never left while we watched).
    #[default]
    Unknown,
    /// It left the daemon group for this reason.
    Cpg(Reason),
    /// Startup fencing: it was not a member when the cluster formed.
    Startup,
}

impl LeftReason {
    /// `reason_str`: the word C's log lines and `dlm_tool status` use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Cpg(r) => r.name(),
            Self::Startup => "startup",
        }
    }
}

/// `-ECANCELED`: what `dlm_tool fence_ack` multicasts.
pub const RESULT_ACKED: i32 = -dlm_proto::errno::ECANCELED;
/// `-ENODATA`: a starting node's "I have fence-in-progress-unknown" announcement.
pub const RESULT_FIPU: i32 = -dlm_proto::errno::ENODATA;
/// Largest agent stdin (`FENCE_CONFIG_ARGS_MAX` - 1).
pub const ARGS_MAX: usize = 4095;

/// The fencing options (read when the daemon starts, as C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceOpts {
    /// `enable_fencing`.
    pub enabled: bool,
    /// `enable_startup_fencing`.
    pub startup: bool,
    /// `enable_quorum_fencing`.
    pub quorum: bool,
    /// `enable_concurrent_fencing`.
    pub concurrent: bool,
    /// `repeat_failed_fencing`.
    pub repeat_failed: bool,
    /// `post_join_delay`, seconds.
    pub post_join_delay: u64,
    /// corosync `two_node` with two configured nodes.
    pub two_node: bool,
}

impl FenceOpts {
    /// The fencing options of `o`; `two_node` is corosync's (with two configured nodes).
    pub fn from_options(o: &crate::config::Options, two_node: bool) -> Self {
        use crate::config::Opt;
        Self {
            enabled: o.on(Opt::EnableFencing),
            startup: o.on(Opt::EnableStartupFencing),
            quorum: o.on(Opt::EnableQuorumFencing),
            concurrent: o.on(Opt::EnableConcurrentFencing),
            repeat_failed: o.on(Opt::RepeatFailedFencing),
            post_join_delay: u64::try_from(o.num(Opt::PostJoinDelay)).unwrap_or(0),
            two_node,
        }
    }
}

impl Default for FenceOpts {
    fn default() -> Self {
        Self {
            enabled: true,
            startup: true,
            quorum: true,
            concurrent: false,
            repeat_failed: true,
            post_join_delay: 30,
            two_node: false,
        }
    }
}

/// What the daemon must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start `agent` (PATH lookup, no arguments) with `stdin`, stdout and stderr to
    /// /dev/null; report [`Fencing::agent_started`] at once and [`Fencing::agent_exited`]
    /// when it ends.
    RunAgent {
        /// The node to fence.
        nodeid: u32,
        /// Program.
        agent: String,
        /// Its whole stdin.
        stdin: String,
        /// Device name (for the log line).
        device: String,
    },
    /// Kill the agent running for a node (SIGKILL) and reap it; no result is sent.
    CancelAgent {
        /// The node it was fencing.
        nodeid: u32,
        /// Its process id.
        pid: u32,
    },
    /// Multicast FENCE_RESULT.
    SendResult {
        /// Subject.
        nodeid: u32,
        /// 0, agent status, -1, or -errno.
        result: i32,
        /// Wall-clock seconds.
        walltime: u64,
    },
    /// Multicast FENCE_CLEAR.
    SendClear {
        /// Subject.
        nodeid: u32,
        /// 0 or -ENODATA.
        result: i32,
        /// `FR_*`.
        flags: u32,
    },
    /// Ask corosync to remove the node from the cluster.
    Kick(u32),
    /// Ask corosync to remove a stateful-merge member, and mark it killed
    /// ([`DaemonProtocol::mark_killed`]) so it is asked once.
    KickMerged(u32),
}

/// Why fencing is in progress (`fence_in_progress`, whose 1, 2, 3 these are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InProgress {
    /// Nothing: lockspaces may start.
    None,
    /// A member announced fence-in-progress-unknown (it started without startup fencing).
    Unknown,
    /// Startup fencing of nodes not yet seen is pending.
    StartupNodes,
    /// A failed node needs fencing.
    NeedFencing,
}

impl InProgress {
    /// Anything in progress.
    pub fn any(self) -> bool {
        self != Self::None
    }
}

/// Where this node's own fencing of a node stands (C's `delay_fencing`, `fence_pid_wait`
/// with `fence_pid`, and `fence_result_wait`, which are never set together).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AgentState {
    /// No agent of ours for it, and no result of ours awaited.
    #[default]
    Idle,
    /// Waiting for `post_join_delay`, or for another node's agent to end.
    Delayed,
    /// Our agent for it runs: its pid, 0 until the spawn reports it.
    Running {
        /// The agent's process id.
        pid: u32,
    },
    /// We sent its FENCE_RESULT and wait to receive it back.
    AwaitingResult,
}

impl AgentState {
    /// Our agent's pid while it runs (C's `fence_pid`), else 0.
    pub fn pid(self) -> u32 {
        match self {
            Self::Running { pid } => pid,
            _ => 0,
        }
    }

    /// A delay ends (the node was fenced or rejoined, or its agent starts now).
    fn undelay(&mut self) {
        if *self == Self::Delayed {
            *self = Self::Idle;
        }
    }
}

/// The fence state of one daemon node (`struct node_daemon`, fence part).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FenceNode {
    /// Must be fenced before lockspaces that lost it start again.
    pub need_fencing: bool,
    /// Our agent for it: idle, delayed, running, or its result awaited.
    pub agent: AgentState,
    /// Why it left (a CPG reason), or startup fencing.
    pub left_reason: LeftReason,
    /// When it failed: monotonic and wall seconds.
    pub fail_monotime: u64,
    /// Wall-clock seconds of the failure.
    pub fail_walltime: u64,
    /// When we learned it was fenced: our monotonic seconds (0: never).
    pub fence_monotime: u64,
    /// Wall-clock seconds from the FENCE_RESULT.
    pub fence_walltime: u64,
    /// `fence_monotime` is when it rejoined cleanly, not when it was fenced.
    pub fenced_by_rejoin: bool,
    /// Last actor chosen.
    pub actor_last: u32,
    /// Who fenced it.
    pub actor_done: u32,
    /// Members present when it failed that may still fence it.
    pub actors: BTreeSet<u32>,
    pub(crate) actors_orig: BTreeSet<u32>,
    /// Its fence devices and the one in use.
    pub(crate) methods: Vec<FenceMethod>,
    pub(crate) pos: usize,
    /// `FR_CLEAR_STARTUP | FR_CLEAR_FIPU` still owed to this (new) member.
    pub need_fence_clear: u32,
    /// It announced fence-in-progress-unknown (startup without startup fencing).
    pub fipu: bool,
    /// The monotonic second the last failed FENCE_RESULT for it was received in (every
    /// member receives the same ones): no agent for it starts again within that second
    /// (see [`AGENT_RETRY_SECS`]).
    pub failed_result_at: Option<u64>,
}

/// After a failed FENCE_RESULT for a node, no agent for it starts anywhere until this many
/// seconds have begun: real agents power-cycle machines through a BMC or a hypervisor, and C
/// notices an agent's exit only at its once-a-second poll, so the cluster retries about once
/// a second (measured: 9–10 runs in 13 s). Without it a failing agent ran every ~10 ms, and
/// a device whose arguments cannot be built failed at message speed.
pub const AGENT_RETRY_SECS: u64 = 1;

/// Fencing as a node sees it; also the lockspaces' view of it.
#[derive(Debug, Clone)]
pub struct Fencing {
    our: u32,
    opts: FenceOpts,
    conf: ConfFile,
    /// Daemon nodes in the order first seen (C's list order, shown by `dlm_tool status`).
    order: Vec<u32>,
    nodes: BTreeMap<u32, FenceNode>,
    /// Configured nodes not yet seen in the daemon group (startup fencing).
    startup: Vec<u32>,
    members: Vec<u32>,
    fipu: bool,
    wait_clear_fipu: bool,
    last_join_seq: u64,
    send_fipu_seq: u64,
    fence_delay_begin: u64,
    stateful_merge_wait: bool,
    ringid_wait: bool,
    daemon_ring_seq: u64,
    allowed: bool,
    retry: bool,
    joined_mono: u64,
    joined_wall: u64,
}

/// The world at one call.
#[derive(Debug, Clone, Copy, Default)]
pub struct FenceEnv {
    /// Monotonic seconds.
    pub now: u64,
    /// Wall-clock seconds.
    pub wall: u64,
    /// Quorate.
    pub quorate: bool,
    /// Ring seq of the last quorum notification.
    pub cluster_ring_seq: u64,
}

fn text(args: &[String]) -> String {
    let mut s = String::new();
    if !args.is_empty() {
        s.push_str(&args.join("\n"));
        s.push('\n');
    }
    s
}

/// The agent's stdin for device `m` (`fence_config_agent_args`): device args, connect
/// args, `node=` unless given, then `extra`; `None` beyond [`ARGS_MAX`].
pub fn agent_args(m: &FenceMethod, nodeid: u32, extra: &str) -> Option<String> {
    let mut s = text(&m.device_args);
    s.push_str(&text(&m.connect_args));
    if !s.contains("node=") {
        s.push_str(&format!("node={nodeid}\n"));
    }
    s.push_str(extra);
    (s.len() <= ARGS_MAX).then_some(s)
}

/// `same_base_name`: `foo:1` and `foo:2` are parallel devices.
fn same_base(a: &str, b: &str) -> bool {
    a.bytes()
        .zip(b.bytes())
        .take_while(|(x, y)| x == y)
        .any(|(x, _)| x == b':')
}

/// The default device when dlm.conf configures none for a node.
fn default_method() -> FenceMethod {
    FenceMethod {
        device: "fence_all".into(),
        agent: "dlm_stonith".into(),
        device_args: Vec::new(),
        connect_args: Vec::new(),
        unfence: false,
    }
}

impl Fencing {
    /// Starts with fence-in-progress-unknown set; with startup fencing every configured
    /// node (`nodelist`, ours included) is a startup node. `joined` is when the cluster
    /// was first seen (monotonic, wall).
    pub fn new(
        our: u32,
        opts: FenceOpts,
        conf: ConfFile,
        nodelist: &[u32],
        joined: (u64, u64),
    ) -> Self {
        let startup = if opts.enabled && opts.startup {
            nodelist.to_vec()
        } else {
            Vec::new()
        };
        Self {
            our,
            opts,
            conf,
            order: Vec::new(),
            nodes: BTreeMap::new(),
            startup,
            members: Vec::new(),
            fipu: true,
            wait_clear_fipu: false,
            last_join_seq: 0,
            send_fipu_seq: 0,
            fence_delay_begin: 0,
            stateful_merge_wait: false,
            ringid_wait: false,
            daemon_ring_seq: 0,
            allowed: false,
            retry: false,
            joined_mono: joined.0,
            joined_wall: joined.1,
        }
    }

    /// The nodes, in the order first seen.
    pub fn nodes(&self) -> impl Iterator<Item = (u32, &FenceNode)> {
        self.order
            .iter()
            .filter_map(|id| self.nodes.get(id).map(|n| (*id, n)))
    }

    /// Startup nodes still waited for.
    pub fn startup_nodes(&self) -> &[u32] {
        &self.startup
    }

    /// `fence_in_progress_unknown`.
    pub fn fipu(&self) -> bool {
        self.fipu
    }

    /// `stateful_merge_wait`: a merge needs an operator.
    pub fn stateful_merge_wait(&self) -> bool {
        self.stateful_merge_wait
    }

    /// `daemon_fence_pid`: our running agent's pid (with concurrent fencing, the one for
    /// the lowest node id), 0 with none.
    pub fn fence_pid(&self) -> u32 {
        self.nodes
            .values()
            .map(|n| n.agent.pid())
            .find(|&p| p != 0)
            .unwrap_or(0)
    }

    /// An agent of ours runs (for any node).
    fn agent_running(&self) -> bool {
        self.nodes
            .values()
            .any(|n| matches!(n.agent, AgentState::Running { .. }))
    }

    /// The work must run again in a second (`retry_fencing`).
    pub fn retry(&self) -> bool {
        self.retry
    }

    /// Monotonic time the node was last fenced (`fence_node_time`); `None` if unknown.
    pub fn fence_time(&self, nodeid: u32) -> Option<u64> {
        self.nodes.get(&nodeid).map(|n| n.fence_monotime)
    }

    /// `fence_in_progress`: what keeps lockspaces from starting, first cause first.
    pub fn in_progress(&self) -> InProgress {
        if self.fipu {
            InProgress::Unknown
        } else if !self.startup.is_empty() {
            InProgress::StartupNodes
        } else if self.nodes.values().any(|n| n.need_fencing) {
            InProgress::NeedFencing
        } else {
            InProgress::None
        }
    }

    /// The node needs fencing now.
    pub fn needs_fencing(&self, nodeid: u32) -> bool {
        self.nodes.get(&nodeid).is_some_and(|n| n.need_fencing)
    }

    fn add_node(&mut self, nodeid: u32) -> &mut FenceNode {
        if !self.nodes.contains_key(&nodeid) {
            self.order.push(nodeid);
        }
        let conf = &self.conf;
        self.nodes.entry(nodeid).or_insert_with(|| {
            let mut methods = conf.fence_methods(nodeid);
            if methods.is_empty() {
                methods.push(default_method());
            }
            FenceNode {
                methods,
                ..FenceNode::default()
            }
        })
    }

    fn reset_for_fencing(n: &mut FenceNode, why: LeftReason, mono: u64, wall: u64) {
        n.need_fencing = true;
        n.agent = AgentState::Idle;
        n.fence_monotime = 0;
        n.fence_walltime = 0;
        n.fenced_by_rejoin = false;
        n.actor_last = 0;
        n.actor_done = 0;
        n.pos = 0;
        n.failed_result_at = None;
        n.left_reason = why;
        n.fail_monotime = mono;
        n.fail_walltime = wall;
    }

    /// `set_fence_actors`: the current members, without those that joined in this change
    /// unless `all`.
    fn set_actors(&mut self, nodeid: u32, joined: &[u32], all: bool) -> u32 {
        let actors: BTreeSet<u32> = self
            .members
            .iter()
            .copied()
            .filter(|m| all || !joined.contains(m))
            .collect();
        let low = actors.first().copied().unwrap_or(0);
        if let Some(n) = self.nodes.get_mut(&nodeid) {
            n.actors_orig = actors.clone();
            n.actors = actors;
        }
        low
    }

    /// The options C lets `reload_config` / `set_config` change.
    /// `reload_config` / `set_config`: the options C re-reads (`post_join_delay`,
    /// `repeat_failed_fencing`, `enable_quorum_fencing`) are taken from `new`; the others
    /// stay as the daemon started.
    pub fn reconfigure(&mut self, new: FenceOpts) {
        self.opts.post_join_delay = new.post_join_delay;
        self.opts.repeat_failed = new.repeat_failed;
        self.opts.quorum = new.quorum;
    }

    /// The daemon protocol is negotiated: fencing work may begin (`daemon_fence_allow`).
    pub fn allow(&mut self) {
        self.allowed = true;
    }

    /// [`Self::allow`] was called: until then the daemon group's messages other than
    /// PROTOCOL are ignored (`deliver_cb_daemon`).
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The quorum service reported new cluster nodes (`quorum_callback`): fencing waits
    /// `post_join_delay` from now, so a node that just joined corosync may join us first.
    pub fn cluster_nodes_added(&mut self, now: u64) {
        self.fence_delay_begin = now;
    }

    /// `confchg_cb_daemon` (fence part), after [`DaemonProtocol::handle_confchg`];
    /// `failed` are the nodes it reported failed (they had joined cleanly) with their
    /// reason. Runs the fence work.
    pub fn handle_confchg(
        &mut self,
        env: FenceEnv,
        proto: &DaemonProtocol,
        cc: &Confchg,
        failed: &[(u32, Reason)],
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let we_joined = cc.joined.contains(&self.our);
        let before = std::mem::replace(&mut self.members, cc.members.clone());
        for &m in &cc.members {
            self.add_node(m);
        }
        if cc.left.iter().any(|&(_, r)| r == Reason::NodeDown) {
            self.ringid_wait = true;
        }
        for &m in &cc.members {
            if before.contains(&m) {
                continue;
            }
            self.fence_delay_begin = env.now;
            self.last_join_seq += 1;
            let n = self.add_node(m);
            if !we_joined {
                n.need_fence_clear = FenceFlags::CLEAR_STARTUP | FenceFlags::CLEAR_FIPU;
            }
            if n.need_fencing {
                tracing::error!("daemon joined {m} needs fencing");
            } else {
                tracing::debug!("daemon joined {m}");
            }
        }
        for &(nodeid, why) in failed {
            if !self.opts.enabled {
                continue;
            }
            let n = self.add_node(nodeid);
            if n.need_fencing {
                tracing::error!("daemon remove {nodeid} already needs fencing");
                continue;
            }
            let why = LeftReason::Cpg(why);
            Self::reset_for_fencing(n, why, env.now, env.wall);
            let low = self.set_actors(nodeid, &cc.joined, false);
            tracing::debug!(
                "daemon remove {nodeid} {} need_fencing 1 low {low}",
                why.name()
            );
        }
        out.extend(self.work(env, proto));
        out
    }

    /// `totem_cb_daemon`: the daemon group's ring; runs the fence work.
    pub fn handle_totem(&mut self, env: FenceEnv, proto: &DaemonProtocol, seq: u64) -> Vec<Action> {
        self.daemon_ring_seq = seq;
        self.ringid_wait = false;
        self.work(env, proto)
    }

    /// The agent for `nodeid` started as `pid` (one that cannot be executed ends at once with
    /// status 1, as C's child after a failed `execlp`).
    pub fn agent_started(&mut self, nodeid: u32, pid: u32) -> Vec<Action> {
        let Some(n) = self.nodes.get_mut(&nodeid) else {
            return Vec::new();
        };
        if let AgentState::Running { pid: p } = &mut n.agent {
            *p = pid;
        }
        let (device, agent) = n
            .methods
            .get(n.pos)
            .map_or(("", ""), |m| (m.device.as_str(), m.agent.as_str()));
        tracing::error!(
            "fence request {nodeid} pid {pid} {} time {} {device} {agent}",
            n.left_reason.name(),
            n.fail_walltime
        );
        Vec::new()
    }

    /// The agent for `nodeid` ended: exit status, or -1 when killed by a signal
    /// (`fence_result`, then the "check outstanding fence requests" step).
    pub fn agent_exited(
        &mut self,
        env: FenceEnv,
        proto: &DaemonProtocol,
        nodeid: u32,
        pid: u32,
        result: i32,
    ) -> Vec<Action> {
        tracing::error!("fence result {nodeid} pid {pid} result {result} exit status");
        let mut out = Vec::new();
        let Some(n) = self.nodes.get_mut(&nodeid) else {
            return out;
        };
        if n.agent != (AgentState::Running { pid }) {
            return out; // an agent we cancelled
        }
        n.agent = AgentState::Idle;
        let next = if result == 0 {
            // the next parallel device (same base name) must succeed too
            let d = n.pos;
            match n.methods.get(d + 1) {
                Some(m) if same_base(&n.methods[d].device, &m.device) => Some(d + 1),
                _ => None,
            }
        } else {
            // the next device with another base name (C sets pos+1, which may be a
            // parallel sibling of the one that failed: we skip to the one it found)
            let d = n.pos;
            (d + 1..n.methods.len())
                .find(|&i| !same_base(&n.methods[d].device, &n.methods[i].device))
        };
        match next {
            Some(p) => n.pos = p,
            None => {
                n.agent = AgentState::AwaitingResult;
                out.push(Action::SendResult {
                    nodeid,
                    result,
                    walltime: env.wall,
                });
            }
        }
        out.extend(self.work(env, proto));
        out
    }

    /// `fence_ack_node`: the operator says the node is fenced.
    pub fn fence_ack(&self, env: FenceEnv, nodeid: u32) -> Action {
        Action::SendResult {
            nodeid,
            result: RESULT_ACKED,
            walltime: env.wall,
        }
    }

    /// `receive_fence_result` from `from`.
    pub fn receive_result(
        &mut self,
        env: FenceEnv,
        proto: &DaemonProtocol,
        from: u32,
        nodeid: u32,
        result: i32,
        walltime: u64,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        if let Some(i) = self.startup.iter().position(|&s| s == nodeid) {
            self.startup.remove(i);
            tracing::debug!("receive_fence_result {nodeid} from {from} clear startup");
            return out;
        }
        let our = self.our;
        let member = proto.nodes().get(&nodeid).is_some_and(|d| d.member);
        let Some(n) = self.nodes.get_mut(&nodeid) else {
            tracing::error!(
                "receive_fence_result {nodeid} from {from} result {result} no daemon node"
            );
            return out;
        };
        if !n.need_fencing {
            tracing::error!(
                "receive_fence_result {nodeid} from {from} result {result} no need_fencing"
            );
            return out;
        }
        let success = result == 0 || result == RESULT_ACKED;
        if member && success {
            tracing::error!(
                "receive_fence_result {nodeid} from {from} result {result} node is daemon_member"
            );
            out.push(Action::Kick(nodeid));
        }
        if from == our && result != RESULT_ACKED && n.agent == AgentState::AwaitingResult {
            n.agent = AgentState::Idle;
        }
        tracing::error!(
            "fence status {nodeid} receive {result} from {from} walltime {walltime} local {}",
            env.now
        );
        if success {
            Self::fenced_by(n, from, walltime, env.now);
        } else {
            Self::failed_by(n, from, env.now, self.opts.repeat_failed);
        }
        if let (RESULT_ACKED, AgentState::Running { pid }) = (result, n.agent) {
            out.push(Action::CancelAgent { nodeid, pid });
            n.agent = AgentState::Idle;
        }
        out.extend(self.work(env, proto));
        out
    }

    /// A FENCE_RESULT of success (or fence_ack) from `from`: the node is fenced.
    fn fenced_by(n: &mut FenceNode, from: u32, walltime: u64, now: u64) {
        n.need_fencing = false;
        n.agent.undelay();
        n.fence_walltime = walltime;
        n.fence_monotime = now;
        n.fenced_by_rejoin = false;
        n.actor_done = from;
    }

    /// A failed FENCE_RESULT from `from`: the next lowest actor tries, at C's pace
    /// (`clear_fence_actor`; the original actors again with `repeat_failed_fencing`).
    fn failed_by(n: &mut FenceNode, from: u32, now: u64, repeat_failed: bool) {
        n.failed_result_at = Some(now);
        n.actors.remove(&from);
        if n.actors.is_empty() && repeat_failed {
            tracing::debug!("clear_fence_actor {from} restoring original actors to retry");
            n.actors = n.actors_orig.clone();
        }
    }

    /// `receive_fence_clear` from `from`.
    pub fn receive_clear(
        &mut self,
        env: FenceEnv,
        proto: &DaemonProtocol,
        from: u32,
        nodeid: u32,
        result: i32,
        flags: u32,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let fipu = self.fipu;
        let Some(n) = self.nodes.get_mut(&nodeid) else {
            tracing::error!("receive_fence_clear from {from} no daemon node {nodeid}");
            return out;
        };
        tracing::debug!(
            "receive_fence_clear from {from} for {nodeid} result {result} flags {flags:x}"
        );
        if result == RESULT_FIPU && flags & FenceFlags::FIPU != 0 {
            if fipu {
                n.fipu = true;
            }
            out.extend(self.work(env, proto));
            return out;
        }
        if result == 0 {
            n.need_fence_clear &= !(flags & (FenceFlags::CLEAR_STARTUP | FenceFlags::CLEAR_FIPU));
        }
        if result == 0 && nodeid == self.our {
            if flags & FenceFlags::CLEAR_STARTUP != 0 && !self.startup.is_empty() {
                tracing::debug!("clear_startup_nodes {}", self.startup.len());
                self.startup.clear();
                self.wait_clear_fipu = true;
            }
            if flags & FenceFlags::CLEAR_FIPU != 0 && self.fipu {
                self.fipu = false;
                self.wait_clear_fipu = false;
                tracing::debug!("fence_in_progress_unknown 0 recv");
            }
        }
        out.extend(self.work(env, proto));
        out
    }

    /// `daemon_fence_work`: called on every daemon event and once a second while
    /// [`Self::retry`].
    pub fn work(&mut self, env: FenceEnv, proto: &DaemonProtocol) -> Vec<Action> {
        let mut out = Vec::new();
        if !self.allowed {
            return out;
        }
        let retry = self.work_inner(env, proto, &mut out);
        self.retry = retry;
        out
    }

    fn work_inner(&mut self, env: FenceEnv, proto: &DaemonProtocol, out: &mut Vec<Action>) -> bool {
        if self.ringid_wait {
            tracing::debug!("fence work wait for cpg ringid");
            return true;
        }
        if env.cluster_ring_seq != self.daemon_ring_seq {
            tracing::debug!("fence work wait for cluster ringid");
            return true;
        }
        let mut retry = false;
        if self.opts.quorum && !env.quorate {
            tracing::debug!("fence work wait for quorum");
            self.fipu_step(out);
            return true;
        }
        if self.merges(proto, out) {
            return true;
        }
        retry |= self.startup_step(env, proto);
        retry |= self.request_step(env, proto, out);
        retry |= self.check_step(env, proto, out);
        self.fipu_step(out);
        retry
    }

    /// Stateful merges block fencing until cleared (non-two_node); true: wait.
    fn merges(&mut self, proto: &DaemonProtocol, out: &mut Vec<Action>) -> bool {
        let (mut gone, mut part, mut merge, mut clean) = (0, 0, 0, 0);
        let mut low = 0;
        for (&id, d) in proto.nodes() {
            if !d.member {
                gone += 1;
                continue;
            }
            if low == 0 || id < low {
                low = id;
            }
            if d.stateful_merge {
                merge += 1;
            } else if d.proto.is_none() {
                part += 1;
            } else {
                clean += 1;
            }
        }
        if !self.opts.two_node && merge > 0 {
            tracing::debug!(
                "fence work wait to clear merge {merge} clean {clean} part {part} gone {gone}"
            );
            if clean >= merge && part == 0 && low == self.our {
                for (&id, d) in proto.nodes() {
                    if d.stateful_merge && !d.killed {
                        tracing::error!("daemon node {id} kill stateful merge member");
                        out.push(Action::KickMerged(id));
                    }
                }
            }
            if clean < merge && part == 0 {
                self.stateful_merge_wait = true;
            }
            return true;
        }
        self.stateful_merge_wait = false;
        false
    }

    fn startup_step(&mut self, env: FenceEnv, proto: &DaemonProtocol) -> bool {
        let mut retry = false;
        for nodeid in std::mem::take(&mut self.startup) {
            if proto.is_clean_member(nodeid) {
                tracing::debug!("fence startup {nodeid} skip member");
                continue;
            }
            if !self.opts.startup {
                self.startup.push(nodeid);
                continue;
            }
            if self.fence_delay_begin == 0 {
                tracing::debug!("fence startup {nodeid} wait for initial delay");
                self.startup.push(nodeid);
                continue;
            }
            if env.now.saturating_sub(self.fence_delay_begin) < self.opts.post_join_delay {
                tracing::debug!(
                    "fence startup {nodeid} delay {} from {}",
                    self.opts.post_join_delay,
                    self.fence_delay_begin
                );
                self.startup.push(nodeid);
                retry = true;
                continue;
            }
            let (mono, wall) = (
                self.joined_mono.saturating_sub(1),
                self.joined_wall.saturating_sub(1),
            );
            let n = self.add_node(nodeid);
            if n.need_fencing {
                tracing::error!("fence startup {nodeid} already set");
                continue;
            }
            Self::reset_for_fencing(n, LeftReason::Startup, mono, wall);
            let low = self.set_actors(nodeid, &[], true);
            tracing::debug!("fence startup nodeid {nodeid} act {low}");
        }
        retry
    }

    /// Marks a node that rejoined cleanly as fenced now.
    fn rejoined(n: &mut FenceNode, nodeid: u32, env: FenceEnv) {
        n.need_fencing = false;
        n.agent.undelay();
        n.fence_walltime = env.wall;
        n.fence_monotime = env.now;
        n.fenced_by_rejoin = true;
        n.actor_done = nodeid;
    }

    fn request_step(
        &mut self,
        env: FenceEnv,
        proto: &DaemonProtocol,
        out: &mut Vec<Action>,
    ) -> bool {
        let mut retry = false;
        for nodeid in self.order.clone() {
            retry |= self.request_node(nodeid, env, proto, out);
        }
        retry
    }

    /// One node of `fence_victims`' pass: skipped, delayed, deferred to another actor, or
    /// its agent started here. `true` when the node must be looked at again later.
    fn request_node(
        &mut self,
        nodeid: u32,
        env: FenceEnv,
        proto: &DaemonProtocol,
        out: &mut Vec<Action>,
    ) -> bool {
        let running = self.agent_running();
        let delay_begin = self.fence_delay_begin;
        let members = &self.members;
        let Some(n) = self.nodes.get_mut(&nodeid) else {
            return false;
        };
        if !n.need_fencing || matches!(n.agent, AgentState::Running { .. }) {
            return false;
        }
        if n.agent == AgentState::AwaitingResult {
            tracing::debug!("fence request {nodeid} result_wait");
            return false;
        }
        if proto.is_clean_member(nodeid) {
            tracing::debug!("fence request {nodeid} skip for is_clean_daemon_member");
            Self::rejoined(n, nodeid, env);
            return false;
        }
        if !self.opts.concurrent && running {
            tracing::debug!("fence request {nodeid} delay for other pid");
            n.agent = AgentState::Delayed;
            return true;
        }
        if env.now.saturating_sub(delay_begin) < self.opts.post_join_delay {
            tracing::debug!(
                "fence request {nodeid} delay {} from {delay_begin}",
                self.opts.post_join_delay
            );
            n.agent = AgentState::Delayed;
            return true;
        }
        n.agent.undelay();
        // get_fence_actor: the lowest actor still a member (gone ones are dropped)
        n.actors.retain(|a| members.contains(a));
        let actor = n.actors.first().copied().unwrap_or(0);
        n.actor_last = actor;
        if actor == 0 {
            tracing::error!("fence request {nodeid} no actor");
            return false;
        }
        if actor != self.our {
            tracing::debug!("fence request {nodeid} defer to {actor}");
            return false;
        }
        if let Some(at) = n.failed_result_at.map(|t| t + AGENT_RETRY_SECS) {
            if env.now < at {
                tracing::debug!("fence request {nodeid} retry at {at} after a failed agent");
                return true;
            }
        }
        Self::start_agent(n, nodeid, env, out);
        false
    }

    /// The agent of `n`'s current method started, or its failure sent at once when it cannot
    /// even start (no such method, bad arguments).
    fn start_agent(n: &mut FenceNode, nodeid: u32, env: FenceEnv, out: &mut Vec<Action>) {
        let extra = format!("fail_time={}\n", n.fail_walltime);
        let request = match n.methods.get(n.pos) {
            None => Err(format!("fence request {nodeid} no config pos {}", n.pos)),
            Some(m) => agent_args(m, nodeid, &extra)
                .map(|stdin| (m, stdin))
                .ok_or_else(|| format!("fence request {nodeid} config args error -1")),
        };
        let (m, stdin) = match request {
            Ok(r) => r,
            Err(why) => {
                // the agent cannot even start: its failure goes out at once
                tracing::error!("{}", why);
                n.agent = AgentState::AwaitingResult;
                out.push(Action::SendResult {
                    nodeid,
                    result: -1,
                    walltime: env.wall,
                });
                return;
            }
        };
        tracing::debug!("fence request {nodeid} pos {}", n.pos);
        out.push(Action::RunAgent {
            nodeid,
            agent: m.agent.clone(),
            stdin,
            device: m.device.clone(),
        });
        n.agent = AgentState::Running { pid: 0 };
    }

    /// Outstanding agents whose node rejoined cleanly are cancelled; a running agent
    /// keeps the work retrying (C polls it with waitpid; here its exit arrives as
    /// [`Self::agent_exited`]).
    fn check_step(&mut self, env: FenceEnv, proto: &DaemonProtocol, out: &mut Vec<Action>) -> bool {
        let mut retry = false;
        for nodeid in self.order.clone() {
            let Some(n) = self.nodes.get_mut(&nodeid) else {
                continue;
            };
            let AgentState::Running { pid } = n.agent else {
                continue;
            };
            if !n.need_fencing {
                continue;
            }
            if proto.is_clean_member(nodeid) {
                tracing::debug!("fence wait {nodeid} pid {pid} skip for is_clean_daemon_member");
                Self::rejoined(n, nodeid, env);
                n.agent = AgentState::Idle;
                out.push(Action::CancelAgent { nodeid, pid });
                continue;
            }
            retry = true;
        }
        retry
    }

    fn fipu_step(&mut self, out: &mut Vec<Action>) {
        let need = self.nodes.values().any(|n| n.need_fencing);
        if self.opts.startup
            && self.fipu
            && self.startup.is_empty()
            && !self.wait_clear_fipu
            && !need
        {
            // case A: everyone started together and startup fencing settled
            self.fipu = false;
            tracing::debug!("fence_in_progress_unknown 0 startup");
        }
        if !self.fipu {
            self.send_clears(need, out);
        }
        if !self.opts.startup && self.fipu {
            self.all_fipu(out);
        }
    }

    /// Case B: the lowest settled member tells new members nothing is pending.
    fn send_clears(&mut self, need: bool, out: &mut Vec<Action>) {
        let low = self
            .members
            .iter()
            .copied()
            .filter(|m| self.nodes.get(m).is_some_and(|n| n.need_fence_clear == 0))
            .min()
            .unwrap_or(0);
        for &m in &self.members {
            let Some(n) = self.nodes.get_mut(&m) else {
                continue;
            };
            if n.need_fence_clear == 0 {
                continue;
            }
            if m == self.our {
                n.need_fence_clear = 0;
                continue;
            }
            if low != self.our {
                continue;
            }
            let mut flags = 0;
            if n.need_fence_clear & FenceFlags::CLEAR_STARTUP != 0 {
                flags |= FenceFlags::CLEAR_STARTUP;
                n.need_fence_clear &= !FenceFlags::CLEAR_STARTUP;
            }
            if n.need_fence_clear & FenceFlags::CLEAR_FIPU != 0 && !need {
                flags |= FenceFlags::CLEAR_FIPU;
                n.need_fence_clear &= !FenceFlags::CLEAR_FIPU;
            }
            if flags != 0 {
                out.push(Action::SendClear {
                    nodeid: m,
                    result: 0,
                    flags,
                });
            }
        }
    }

    /// Case C: everyone started together without startup fencing, or we announce our
    /// fence-in-progress-unknown to those who joined since we last did.
    fn all_fipu(&mut self, out: &mut Vec<Action>) {
        let all = self
            .members
            .iter()
            .all(|m| self.nodes.get(m).is_some_and(|n| n.fipu));
        if all && !self.members.is_empty() {
            for m in &self.members {
                if let Some(n) = self.nodes.get_mut(m) {
                    n.fipu = false;
                }
            }
            self.fipu = false;
            tracing::debug!("fence_in_progress_unknown 0 all_fipu");
        } else if self.last_join_seq > self.send_fipu_seq {
            out.push(Action::SendClear {
                nodeid: self.our,
                result: RESULT_FIPU,
                flags: FenceFlags::FIPU,
            });
            tracing::debug!("send_fence_clear {} fipu", self.our);
            self.send_fipu_seq = self.last_join_seq;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{FenceOpts, LeftReason};
    use dlm_cpg::Reason;

    #[test]
    fn options_map_to_fence_opts() {
        use crate::config::{Config, Opt, Value};
        let c = Config::load(
            &[(Opt::EnableConcurrentFencing, Value::Num(1))],
            Some("enable_fencing=0\nenable_startup_fencing=0\npost_join_delay=7\nrepeat_failed_fencing=0\n"),
        )
        .expect("loads");
        assert_eq!(
            FenceOpts::from_options(&c.options, true),
            FenceOpts {
                enabled: false,
                startup: false,
                quorum: true,
                concurrent: true,
                repeat_failed: false,
                post_join_delay: 7,
                two_node: true,
            }
        );
        let d = Config::load(&[], None).expect("defaults");
        assert_eq!(
            FenceOpts::from_options(&d.options, false),
            FenceOpts::default()
        );
    }

    #[test]
    fn reason_words_are_cs() {
        let words: Vec<&str> = [LeftReason::Startup]
            .into_iter()
            .chain(
                (1..=5)
                    .chain([9])
                    .map(|r| LeftReason::Cpg(Reason::from_raw(r))),
            )
            .chain([LeftReason::Unknown])
            .map(LeftReason::name)
            .collect();
        assert_eq!(
            words,
            [
                "startup", "join", "leave", "nodedown", "nodeup", "procdown", "unknown", "unknown"
            ]
        );
    }
}
