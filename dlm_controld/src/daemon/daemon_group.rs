//! The daemon group `dlm:controld` in the shell: it feeds the group's events and the
//! other inputs to the [`DaemonCore`], performs its actions (multicasts, agents, kicks,
//! commands, counters), and publishes the facts the lockspaces wait on and the status the
//! query socket shows. Every decision is the core's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dlm_cpg::Event;
use tokio::sync::{mpsc, watch};

use super::Comms;
use super::agent::{self, AgentExit, RunExit};
use super::cluster::{ClusterGroup, CorosyncServices};
use super::query::SharedStatus;
use crate::confchg::Confchg;
pub(crate) use crate::daemon_core::FenceFacts;
use crate::daemon_core::{Action, DaemonCore, Now};

/// The daemon group's shell.
pub(crate) struct DaemonGroup {
    pub(crate) group: ClusterGroup,
    core: DaemonCore,
    status: SharedStatus,
    facts: watch::Sender<FenceFacts>,
    exits: mpsc::UnboundedSender<AgentExit>,
    /// `dlm_tool run` commands' exits (`enable_helper`).
    run_exits: mpsc::UnboundedSender<RunExit>,
    /// Set by lockspace tasks when one starts: our PROTOCOL then says STATEFUL.
    stateful: Arc<AtomicBool>,
    comms: Comms,
}

/// The channels a [`DaemonGroup`] reports agent and command exits on.
pub(crate) struct Exits {
    pub(crate) agents: mpsc::UnboundedSender<AgentExit>,
    pub(crate) runs: mpsc::UnboundedSender<RunExit>,
}

fn now() -> Now {
    Now {
        mono: crate::clock::monotonic_secs(),
        wall: super::wall_secs(),
    }
}

impl DaemonGroup {
    pub(crate) fn new(
        group: ClusterGroup,
        core: DaemonCore,
        status: SharedStatus,
        facts: watch::Sender<FenceFacts>,
        exits: Exits,
        comms: Comms,
    ) -> Self {
        Self {
            group,
            core,
            status,
            facts,
            exits: exits.agents,
            run_exits: exits.runs,
            stateful: Arc::default(),
            comms,
        }
    }

    /// The flag lockspace tasks set when one starts.
    pub(crate) fn stateful(&self) -> Arc<AtomicBool> {
        self.stateful.clone()
    }

    /// The protocol negotiation's outcome, once there is one.
    pub(crate) fn negotiated(&self) -> Option<Result<(), crate::daemon_proto::ProtoError>> {
        self.core.proto().negotiated().map(|r| r.map(|_| ()))
    }

    /// Fencing work may begin (our protocol is set).
    pub(crate) fn start_fencing(&mut self, services: Option<&CorosyncServices>) {
        let a = self.core.handle_negotiated(now());
        self.perform(a, services);
    }

    /// `close_cpg_daemon`: on a clean exit we leave the group before the handle is
    /// finalized. A finalize alone is reported to the others as the daemon's process
    /// going down (PROCDOWN), a daemon failure: they would fence this node (and C kicks
    /// it out of the cluster) for a plain `systemctl stop dlm`.
    pub(crate) fn leave(&mut self) {
        if let Err(e) = self.group.try_flush() {
            tracing::error!("daemon cpg flush before leave: {e}");
        }
        // corosync may answer TRY_AGAIN during a membership sync: a few more tries, briefly
        // (the daemon is on its way out)
        for _ in 0..20 {
            match self.group.leave() {
                Ok(()) => {
                    tracing::debug!("daemon cpg_leave");
                    return;
                }
                Err(dlm_cpg::CpgError::TryAgain) => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(e) => {
                    tracing::error!("daemon cpg_leave error {e}");
                    return;
                }
            }
        }
        tracing::error!("daemon cpg_leave: corosync said try again for 1 s; finalizing");
    }

    /// One event of the daemon group.
    pub(crate) fn event(&mut self, ev: Event, services: Option<&CorosyncServices>) {
        if self.stateful.load(Ordering::Relaxed) {
            self.core.set_stateful();
        }
        let a = match ev {
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
                let cc = Confchg::of(&members, &left, &joined);
                crate::log::log_config("dlm:controld", &cc.members, &cc.joined, &cc.gone());
                self.core.handle_confchg(now(), &cc)
            }
            Event::Deliver {
                nodeid, payload, ..
            } => self.core.handle_delivery(now(), nodeid, &payload),
            Event::Totem { ring, .. } => {
                if let Ok(mut st) = self.status.lock() {
                    st.daemon_ringid = ring.seq;
                }
                tracing::debug!("dlm:controld ring {}:{}", ring.nodeid, ring.seq);
                self.core.handle_totem(now(), ring.seq)
            }
        };
        self.perform(a, services);
    }

    /// The quorum service's notification.
    pub(crate) fn quorum_change(&mut self, c: &dlm_cpg::QuorumChange, services: &CorosyncServices) {
        let a = self
            .core
            .handle_quorum(now(), c.quorate, c.ring_seq, &c.nodes);
        if let Ok(mut st) = self.status.lock() {
            st.quorate = c.quorate;
            st.cluster_ringid = c.ring_seq;
        }
        self.perform(a, Some(services));
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

    /// Performs the core's actions (an agent's start reports its pid back at once, and
    /// what that asks follows), then publishes the new facts.
    fn perform(&mut self, actions: Vec<Action>, services: Option<&CorosyncServices>) {
        let mut queue = std::collections::VecDeque::from(actions);
        while let Some(a) = queue.pop_front() {
            match a {
                Action::Send(bytes) => {
                    if let Err(e) = self.group.mcast(&bytes) {
                        tracing::error!("dlm:controld: multicast: {e}");
                    }
                }
                Action::Kick(n) => kick(services, n),
                Action::AddComms(n) => {
                    if let Some(s) = services {
                        self.comms.add(s, n);
                    }
                }
                Action::DelComms(n) => self.comms.del(n),
                Action::RunAgent {
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
                    queue.extend(self.core.handle_agent_started(nodeid, pid));
                }
                Action::CancelAgent { nodeid, pid } => agent::cancel(nodeid, pid),
                Action::Exec { uuid, command } => {
                    agent::run_command(uuid, &command, self.run_exits.clone());
                }
                Action::Dropped => crate::metrics::get().daemon_dropped.inc(),
                Action::FenceReceived(outcome) => crate::metrics::get()
                    .fence_received
                    .with_label_values(&[outcome])
                    .inc(),
            }
        }
        self.publish();
    }

    fn publish(&mut self) {
        if let Ok(mut st) = self.status.lock() {
            st.update(self.core.proto(), self.core.fencing());
            st.run_list = self.core.runs().list_text();
        }
        let need = self.core.need_fencing();
        crate::metrics::get()
            .need_fencing
            .set(i64::try_from(need).unwrap_or(i64::MAX));
        let facts = self.core.facts();
        self.facts.send_if_modified(|f| {
            let changed = *f != facts;
            *f = facts;
            changed
        });
    }

    /// `dlm_tool run`: (rv, uuid).
    pub(crate) fn run_start(&mut self, dest: i32, flags: u32, command: &[u8]) -> (i32, String) {
        let uuid = match agent::new_uuid() {
            Ok(u) => u,
            Err(e) => {
                tracing::error!("run: no uuid for the run: {e}");
                return (-dlm_proto::errno::EIO, String::new());
            }
        };
        let (r, a) = self.core.run_start(dest, flags, command, uuid);
        self.perform(a, None);
        r
    }

    /// `dlm_tool run_check`: (rv, status).
    pub(crate) fn run_check(&mut self, uuid: &str, flags: u32) -> (i32, u32) {
        let r = self.core.run_check(uuid, flags);
        // a CLEAR or CANCEL forgot the run: the run list queries read changes
        self.publish();
        r
    }

    /// A command of a run ended here.
    pub(crate) fn run_exit(&mut self, e: RunExit) {
        let a = self.core.handle_run_exit(&e.uuid, e.pid, e.result);
        self.perform(a, None);
    }

    /// Options changed at run time (`reload_config`, `set_config`).
    pub(crate) fn reconfigure(&mut self, o: &crate::config::Options) {
        use crate::config::Opt;
        let two_node = self.core.quorum().0.two_node;
        let opts = crate::fencing::FenceOpts::from_options(o, two_node);
        self.core
            .handle_config(opts, o.on(Opt::EnableQuorumLockspace));
        self.publish();
    }

    /// The once-a-second timeout.
    pub(crate) fn tick(&mut self, services: Option<&CorosyncServices>) {
        let a = self.core.handle_timeout(now());
        self.perform(a, services);
    }

    /// An agent ended.
    pub(crate) fn agent_exit(&mut self, e: AgentExit, services: Option<&CorosyncServices>) {
        let result = if e.result == 0 { "success" } else { "failure" };
        crate::metrics::get()
            .fence_results
            .with_label_values(&[result])
            .inc();
        let a = self
            .core
            .handle_agent_exit(now(), e.nodeid, e.pid, e.result);
        self.perform(a, services);
    }

    /// `dlm_tool fence_ack <nodeid>`.
    pub(crate) fn fence_ack(&mut self, nodeid: u32, services: Option<&CorosyncServices>) {
        let a = self.core.handle_fence_ack(now(), nodeid);
        self.perform(a, services);
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
