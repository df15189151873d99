//! A CPG configuration change as the cores take it: node ids in CPG order, their daemons'
//! process ids, and why each node that left did (the typed CPG reason, never its raw
//! number).

use dlm_cpg::{Member, Reason};

/// One configuration change of a group (`cpg_confchg_fn_t`'s three lists).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Confchg {
    /// The members after the change.
    pub members: Vec<u32>,
    /// The members' process ids, in the same order (empty when not known): a daemon that
    /// restarted on a node is another process of the same node.
    pub pids: Vec<u32>,
    /// The nodes that left, and why.
    pub left: Vec<(u32, Reason)>,
    /// The nodes that joined.
    pub joined: Vec<u32>,
}

impl Confchg {
    /// From node ids (simulations and tests).
    pub fn new(members: &[u32], left: &[(u32, Reason)], joined: &[u32]) -> Self {
        Self {
            members: members.to_vec(),
            pids: Vec::new(),
            left: left.to_vec(),
            joined: joined.to_vec(),
        }
    }

    /// From corosync's member lists.
    pub fn of(members: &[Member], left: &[Member], joined: &[Member]) -> Self {
        let ids = |l: &[Member]| l.iter().map(|m| m.nodeid).collect();
        Self {
            members: ids(members),
            pids: members.iter().map(|m| m.pid).collect(),
            left: left.iter().map(|m| (m.nodeid, m.reason)).collect(),
            joined: ids(joined),
        }
    }

    /// Why `nodeid` left in this change, if it did.
    pub fn left_reason(&self, nodeid: u32) -> Option<Reason> {
        self.left.iter().find(|(n, _)| *n == nodeid).map(|l| l.1)
    }

    /// The nodes that left.
    pub fn gone(&self) -> Vec<u32> {
        self.left.iter().map(|l| l.0).collect()
    }
}

/// A member that failed: its node went down or its process died without leaving.
pub fn failed(reason: Reason) -> bool {
    matches!(reason, Reason::NodeDown | Reason::ProcDown)
}
