//! The daemon's state as `dlm_tool status` reads it: the DUMP_STATUS record stream
//! (daemon_cpg.c `print_state_daemon`, `print_state_daemon_node`), pure.
//!
//! This build runs without fencing (enable_fencing=0 on corosync), so every fencing field
//! holds what the C daemon shows with fencing disabled: zeros and `left_reason=unknown`.

use dlm_proto::query::{StateRecord, StateType};

use crate::daemon_proto::DaemonNode;

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
    /// A stateful merge waits for a kill not yet made (set by [`Self::set_nodes`]).
    pub stateful_merge_wait: bool,
    /// Daemon nodes, in the order first seen.
    pub nodes: Vec<(u32, DaemonNode)>,
}

impl DaemonStatus {
    /// Records a node's state; new ones go last (C's list order).
    pub fn set_nodes<'a>(&mut self, nodes: impl IntoIterator<Item = (u32, &'a DaemonNode)>) {
        for (id, n) in nodes {
            match self.nodes.iter_mut().find(|(i, _)| *i == id) {
                Some((_, old)) => *old = n.clone(),
                None => self.nodes.push((id, n.clone())),
            }
        }
        self.stateful_merge_wait = self
            .nodes
            .iter()
            .any(|(_, n)| n.member && n.stateful_merge && !n.killed);
    }

    /// `print_state_daemon` at monotonic time `now`.
    pub fn daemon_text(&self, now: u64) -> String {
        format!(
            "member_count={} joined_count={} remove_count={} daemon_ringid={} \
             cluster_ringid={} quorate={} fence_pid=0 fence_in_progress_unknown=0 \
             zombie_count=0 monotime={now} stateful_merge_wait={} ",
            self.member_count,
            self.joined_count,
            self.remove_count,
            self.daemon_ringid,
            self.cluster_ringid,
            u8::from(self.quorate),
            u8::from(self.stateful_merge_wait),
        )
    }

    /// The stream: the DAEMON record, then one DAEMON_NODE record per node.
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
        v
    }
}

/// `print_state_daemon_node`, fencing disabled.
pub fn node_text(n: &DaemonNode) -> String {
    format!(
        "member={} killed={} left_reason=unknown need_fencing=0 delay_fencing=0 fence_pid=0 \
         fence_pid_wait=0 fence_result_wait=0 fence_actor_last=0 fence_actor_done=0 \
         add_time={} rem_time={} fail_walltime=0 fail_monotime=0 fence_walltime=0 \
         fence_monotime=0 ",
        u8::from(n.member),
        u8::from(n.killed),
        n.add_time,
        n.rem_time,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_have_c_keys_in_c_order() {
        let mut s = DaemonStatus {
            our: 1,
            member_count: 2,
            joined_count: 1,
            quorate: true,
            daemon_ringid: 5,
            cluster_ringid: 5,
            ..DaemonStatus::default()
        };
        let a = DaemonNode {
            member: true,
            add_time: 447,
            ..DaemonNode::default()
        };
        let b = DaemonNode {
            member: false,
            add_time: 440,
            rem_time: 446,
            ..DaemonNode::default()
        };
        s.set_nodes([(2, &b), (1, &a)]);
        s.set_nodes([(1, &a)]);
        assert_eq!(
            s.daemon_text(453),
            "member_count=2 joined_count=1 remove_count=0 daemon_ringid=5 cluster_ringid=5 \
             quorate=1 fence_pid=0 fence_in_progress_unknown=0 zombie_count=0 monotime=453 \
             stateful_merge_wait=0 "
        );
        let r = s.records(453);
        assert_eq!(r.len(), 3);
        assert_eq!((r[1].nodeid, r[2].nodeid), (2, 1), "first seen first");
        assert_eq!(
            String::from_utf8_lossy(&r[1].text),
            "member=0 killed=0 left_reason=unknown need_fencing=0 delay_fencing=0 fence_pid=0 \
             fence_pid_wait=0 fence_result_wait=0 fence_actor_last=0 fence_actor_done=0 \
             add_time=440 rem_time=446 fail_walltime=0 fail_monotime=0 fence_walltime=0 \
             fence_monotime=0 "
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
