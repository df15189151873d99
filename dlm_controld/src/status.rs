//! The daemon's state as `dlm_tool status` reads it: the DUMP_STATUS record stream
//! (daemon_cpg.c `print_state_daemon`, `print_state_daemon_node`,
//! `send_state_startup_nodes`), pure.

use dlm_proto::query::{StateRecord, StateType};

use crate::daemon_proto::{DaemonNode, DaemonProtocol};
use crate::fencing::{AgentState, FenceNode, Fencing};

/// One daemon node: its protocol part and its fence part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStatus {
    /// Membership and protocol.
    pub daemon: DaemonNode,
    /// Fencing.
    pub fence: FenceNode,
}

/// The daemon-wide fields of the DAEMON record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonStatus {
    /// Our node id.
    pub our: u32,
    /// Members after the last daemon group change.
    pub member_count: usize,
    /// Joined in it.
    pub joined_count: usize,
    /// Left in it.
    pub remove_count: usize,
    /// Ring seq of the daemon group's last totem event.
    pub daemon_ringid: u64,
    /// Ring seq of the last quorum notification.
    pub cluster_ringid: u64,
    /// Quorate now.
    pub quorate: bool,
    /// Process id of the running fence agent (0: none).
    pub fence_pid: u32,
    /// `fence_in_progress_unknown`.
    pub fipu: bool,
    /// A stateful merge needs an operator.
    pub stateful_merge_wait: bool,
    /// Daemon nodes, in the order first seen.
    pub nodes: Vec<(u32, NodeStatus)>,
    /// Startup nodes not yet seen.
    pub startup: Vec<u32>,
    /// The `dlm_tool run_list` text.
    pub run_list: String,
}

impl DaemonStatus {
    /// Takes the nodes and the fencing fields from the machines.
    pub fn update(&mut self, proto: &DaemonProtocol, fencing: &Fencing) {
        self.nodes = fencing
            .nodes()
            .map(|(id, f)| {
                let daemon = proto.nodes().get(&id).cloned().unwrap_or_default();
                (
                    id,
                    NodeStatus {
                        daemon,
                        fence: f.clone(),
                    },
                )
            })
            .collect();
        self.startup = fencing.startup_nodes().to_vec();
        self.fence_pid = fencing.fence_pid();
        self.fipu = fencing.fipu();
        self.stateful_merge_wait = fencing.stateful_merge_wait();
    }

    /// `print_state_daemon` at monotonic time `now`.
    pub fn daemon_text(&self, now: u64) -> String {
        format!(
            "member_count={} joined_count={} remove_count={} daemon_ringid={} \
             cluster_ringid={} quorate={} fence_pid={} fence_in_progress_unknown={} \
             zombie_count=0 monotime={now} stateful_merge_wait={} ",
            self.member_count,
            self.joined_count,
            self.remove_count,
            self.daemon_ringid,
            self.cluster_ringid,
            u8::from(self.quorate),
            self.fence_pid,
            u8::from(self.fipu),
            u8::from(self.stateful_merge_wait),
        )
    }

    /// The stream: the DAEMON record, one DAEMON_NODE record per node, one STARTUP_NODE
    /// record per startup node.
    pub fn records(&self, now: u64) -> Vec<StateRecord> {
        let mut v = vec![StateRecord {
            kind: StateType::Daemon,
            nodeid: i32::try_from(self.our).unwrap_or(0),
            text: self.daemon_text(now).into_bytes(),
        }];
        for (id, n) in &self.nodes {
            v.push(StateRecord {
                kind: StateType::DaemonNode,
                nodeid: i32::try_from(*id).unwrap_or(0),
                text: node_text(n).into_bytes(),
            });
        }
        for id in &self.startup {
            v.push(StateRecord {
                kind: StateType::StartupNode,
                nodeid: i32::try_from(*id).unwrap_or(0),
                text: node_text(&NodeStatus::default()).into_bytes(),
            });
        }
        v
    }
}

/// `print_state_daemon_node`.
pub fn node_text(n: &NodeStatus) -> String {
    let (d, f) = (&n.daemon, &n.fence);
    format!(
        "member={} killed={} left_reason={} need_fencing={} delay_fencing={} fence_pid={} \
         fence_pid_wait={} fence_result_wait={} fence_actor_last={} fence_actor_done={} \
         add_time={} rem_time={} fail_walltime={} fail_monotime={} fence_walltime={} \
         fence_monotime={} ",
        u8::from(d.member),
        u8::from(d.killed),
        f.left_reason.name(),
        u8::from(f.need_fencing),
        u8::from(f.agent == AgentState::Delayed),
        f.agent.pid(),
        u8::from(matches!(f.agent, AgentState::Running { .. })),
        u8::from(f.agent == AgentState::AwaitingResult),
        f.actor_last,
        f.actor_done,
        d.add_time,
        d.rem_time,
        f.fail_walltime,
        f.fail_monotime,
        f.fence_walltime,
        f.fence_monotime,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_have_c_keys_in_c_order() {
        let a = NodeStatus {
            daemon: DaemonNode {
                member: true,
                add_time: 447,
                ..DaemonNode::default()
            },
            fence: FenceNode::default(),
        };
        let b = NodeStatus {
            daemon: DaemonNode {
                member: false,
                add_time: 440,
                rem_time: 446,
                ..DaemonNode::default()
            },
            fence: FenceNode {
                need_fencing: true,
                left_reason: crate::fencing::LeftReason::Cpg(dlm_cpg::Reason::NodeDown),
                fail_monotime: 446,
                fail_walltime: 1_795_993_876,
                actor_last: 1,
                agent: AgentState::Running { pid: 4242 },
                ..FenceNode::default()
            },
        };
        let s = DaemonStatus {
            our: 1,
            member_count: 2,
            joined_count: 1,
            quorate: true,
            daemon_ringid: 5,
            cluster_ringid: 5,
            fence_pid: 4242,
            nodes: vec![(2, b), (1, a)],
            startup: vec![3],
            ..DaemonStatus::default()
        };
        assert_eq!(
            s.daemon_text(453),
            "member_count=2 joined_count=1 remove_count=0 daemon_ringid=5 cluster_ringid=5 \
             quorate=1 fence_pid=4242 fence_in_progress_unknown=0 zombie_count=0 monotime=453 \
             stateful_merge_wait=0 "
        );
        let r = s.records(453);
        assert_eq!(r.len(), 4);
        assert_eq!((r[1].nodeid, r[2].nodeid), (2, 1), "first seen first");
        assert_eq!(
            String::from_utf8_lossy(&r[1].text),
            "member=0 killed=0 left_reason=nodedown need_fencing=1 delay_fencing=0 \
             fence_pid=4242 fence_pid_wait=1 fence_result_wait=0 fence_actor_last=1 \
             fence_actor_done=0 add_time=440 rem_time=446 fail_walltime=1795993876 \
             fail_monotime=446 fence_walltime=0 fence_monotime=0 "
        );
        assert_eq!((r[3].kind, r[3].nodeid), (StateType::StartupNode, 3));
        assert!(
            String::from_utf8_lossy(&r[3].text)
                .starts_with("member=0 killed=0 left_reason=unknown ")
        );
        let mut bytes = Vec::new();
        for rec in &r {
            rec.encode_into(&mut bytes);
        }
        let (first, used) = StateRecord::decode(&bytes).expect("decode");
        assert_eq!(first, r[0]);
        assert_eq!(used, 28 + r[0].text.len() + 1);
    }
}
