//! The daemon group `dlm:controld`: PROTOCOL negotiation and stateful-merge detection
//! (daemon_cpg.c `set_protocol`, `receive_protocol`, `confchg_cb_daemon`), sans I/O.
//!
//! Every member announces `{daemon_max, kernel_max, daemon_run, kernel_run}` whenever
//! someone joins. A newcomer that has everyone's announcement and no negotiated protocol
//! proposes the minimums (major, then minor within it, then patch); anyone without a run
//! protocol adopts the first non-zero run it receives. A member that had run a lockspace
//! (`PV_STATEFUL`) and comes back through a merge without having left cleanly is a
//! *stateful merge*: it is killed through corosync when we are quorate and became quorate
//! before it left (two_node clusters defer the kill while it still needs fencing).

use std::collections::BTreeMap;

use dlm_cpg::Reason;
use dlm_proto::wire::{DAEMON_PROTOCOL, KERNEL_PROTOCOL, Protocol, ProtocolVersion, Version3};

use crate::confchg::{Confchg, failed};

/// What the daemon must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Multicast this PROTOCOL body on the daemon group.
    SendProtocol(Protocol),
    /// Ask corosync to kill this node (`kick_node_from_cluster`).
    Kick(u32),
    /// A daemon member that had fully joined failed: fencing must consider it.
    Failed {
        /// Node.
        nodeid: u32,
        /// Why: [`Reason::NodeDown`] or [`Reason::ProcDown`].
        reason: Reason,
    },
}

/// Why negotiation failed (fatal at startup).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The cluster runs a protocol this daemon cannot speak.
    #[error("incompatible daemon protocol: run {run} max {max}")]
    Incompatible {
        /// Negotiated.
        run: Version3,
        /// Ours.
        max: Version3,
    },
}

/// A node seen in the daemon group (`struct node_daemon`, protocol part).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonNode {
    /// In the daemon group now.
    pub member: bool,
    /// Its last accepted announcement; `None` until accepted since it (re)joined.
    pub proto: Option<Protocol>,
    /// Monotonic time it joined the group.
    pub add_time: u64,
    /// Monotonic time it left the group (0: never).
    pub rem_time: u64,
    /// We asked corosync to kill it.
    pub killed: bool,
    /// Detected as a stateful merge.
    pub stateful_merge: bool,
}

/// The environment of one PROTOCOL delivery.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuorumView {
    /// The cluster is quorate.
    pub quorate: bool,
    /// Monotonic time it became quorate.
    pub quorate_since: u64,
    /// corosync `two_node` mode.
    pub two_node: bool,
}

/// The daemon group's protocol state, on node `our_nodeid`.
#[derive(Debug, Clone)]
pub struct DaemonProtocol {
    our: u32,
    ours: Protocol,
    nodes: BTreeMap<u32, DaemonNode>,
    members: Vec<u32>,
    proposed: bool,
}

impl DaemonProtocol {
    /// Our maxima are 3.1.1 / 1.1.1, nothing negotiated yet.
    pub fn new(our_nodeid: u32) -> Self {
        Self::with_max(our_nodeid, DAEMON_PROTOCOL, KERNEL_PROTOCOL)
    }

    /// Other maxima (a future protocol bump, and tests of mixed versions).
    pub fn with_max(our_nodeid: u32, daemon_max: Version3, kernel_max: Version3) -> Self {
        let max = |version| ProtocolVersion { version, flags: 0 };
        Self {
            our: our_nodeid,
            ours: Protocol {
                daemon_max: max(daemon_max),
                kernel_max: max(kernel_max),
                ..Protocol::default()
            },
            nodes: BTreeMap::new(),
            members: Vec::new(),
            proposed: false,
        }
    }

    /// Our announcement as it stands.
    pub fn ours(&self) -> Protocol {
        self.ours
    }

    /// Known daemon nodes.
    pub fn nodes(&self) -> &BTreeMap<u32, DaemonNode> {
        &self.nodes
    }

    /// A member whose announcement we accepted (`is_clean_daemon_member`).
    pub fn is_clean_member(&self, nodeid: u32) -> bool {
        self.nodes
            .get(&nodeid)
            .is_some_and(|n| n.member && n.proto.is_some())
    }

    /// The negotiated daemon protocol, once known, checked against ours.
    pub fn negotiated(&self) -> Option<Result<(Version3, Version3), ProtoError>> {
        let dr = self.ours.daemon_run.version;
        if dr.0[0] == 0 {
            return None;
        }
        let kr = self.ours.kernel_run.version;
        let (dm, km) = (self.ours.daemon_max.version, self.ours.kernel_max.version);
        if dr.0[0] != dm.0[0] || dr.0[1] > dm.0[1] {
            return Some(Err(ProtoError::Incompatible { run: dr, max: dm }));
        }
        if kr.0[0] != km.0[0] || kr.0[1] > km.0[1] {
            return Some(Err(ProtoError::Incompatible { run: kr, max: km }));
        }
        Some(Ok((dr, kr)))
    }

    /// The current members, as the last configuration change listed them.
    pub fn members(&self) -> &[u32] {
        &self.members
    }

    /// We asked corosync to kill this stateful-merge member (`kick_stateful_merge_members`).
    pub fn mark_killed(&mut self, nodeid: u32) {
        if let Some(n) = self.nodes.get_mut(&nodeid) {
            n.killed = true;
        }
    }

    /// `set_protocol_stateful`: a lockspace has started; never cleared.
    pub fn set_stateful(&mut self) {
        self.ours.daemon_run.flags |= ProtocolVersion::STATEFUL;
    }

    /// `confchg_cb_daemon` (protocol part).
    pub fn handle_confchg(&mut self, now: u64, cc: &Confchg) -> Vec<Action> {
        let mut out = Vec::new();
        self.members.clone_from(&cc.members);
        for &m in &cc.members {
            self.nodes.entry(m).or_default();
        }
        if !cc.joined.is_empty() {
            out.push(Action::SendProtocol(self.ours));
        }
        for (&nodeid, node) in &mut self.nodes {
            let is_member = cc.members.contains(&nodeid);
            if is_member && !node.member {
                node.member = true;
                node.add_time = now;
            } else if !is_member && node.member {
                node.member = false;
                node.rem_time = now;
                node.killed = false;
                node.stateful_merge = false;
                let had_joined = node.proto.take().is_some();
                match cc.left_reason(nodeid) {
                    Some(reason) if had_joined && failed(reason) => {
                        out.push(Action::Failed { nodeid, reason });
                    }
                    _ => {}
                }
            }
        }
        out.extend(self.propose());
        out
    }

    /// `set_protocol`'s proposal step: once every member has announced and nothing is
    /// negotiated, propose the minimums (once).
    fn propose(&mut self) -> Option<Action> {
        if self.proposed || self.ours.daemon_run.version.0[0] != 0 || self.members.is_empty() {
            return None;
        }
        let protos: Vec<Protocol> = self
            .members
            .iter()
            .map(|m| self.nodes.get(m).and_then(|n| n.proto))
            .collect::<Option<_>>()?;
        let pick = |get: fn(&Protocol) -> Version3| -> Option<Version3> {
            let maj = protos.iter().map(|p| get(p).0[0]).min()?;
            let min = protos
                .iter()
                .filter(|p| get(p).0[0] == maj)
                .map(|p| get(p).0[1])
                .min()?;
            let pat = protos
                .iter()
                .filter(|p| get(p).0[0] == maj && get(p).0[1] == min)
                .map(|p| get(p).0[2])
                .min()?;
            (maj != 0 && min != 0 && pat != 0).then_some(Version3([maj, min, pat]))
        };
        let dr = pick(|p| p.daemon_max.version)?;
        let kr = pick(|p| p.kernel_max.version)?;
        self.proposed = true;
        let mut proposal = self.ours;
        proposal.daemon_run.version = dr;
        proposal.kernel_run.version = kr;
        Some(Action::SendProtocol(proposal))
    }

    /// `receive_protocol`: an announcement from `from`, already validated by the decoder.
    pub fn handle_protocol(
        &mut self,
        from: u32,
        p: &Protocol,
        q: QuorumView,
        needs_fencing: bool,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let ours_stateful = self.ours.daemon_run.flags & ProtocolVersion::STATEFUL != 0;
        let Some(node) = self.nodes.get_mut(&from) else {
            return out;
        };
        if !node.member {
            return out;
        }
        if from != self.our
            && node.proto.is_none()
            && p.daemon_run.flags & ProtocolVersion::STATEFUL != 0
            && ours_stateful
        {
            node.stateful_merge = true;
            if q.quorate && node.rem_time != 0 && q.quorate_since < node.rem_time {
                // two_node: the node that fenced the other kills it, once fencing is done
                let defer = q.two_node && needs_fencing;
                if !node.killed && !defer {
                    out.push(Action::Kick(from));
                }
                node.killed = true;
            }
            // its announcement is not accepted: it stays unclean
            return out;
        }
        node.proto = Some(*p);
        if self.ours.daemon_run.version.0[0] == 0 && p.daemon_run.version.0[0] != 0 {
            // adopt the first run protocol seen, then announce it (end of set_protocol)
            self.ours.daemon_run.version = p.daemon_run.version;
            self.ours.kernel_run.version = p.kernel_run.version;
            out.push(Action::SendProtocol(self.ours));
            return out;
        }
        out.extend(self.propose());
        out
    }
}
