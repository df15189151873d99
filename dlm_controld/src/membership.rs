//! The lockspace membership machine of cpg.c ("changes" and START barriers), sans I/O.
//!
//! Every CPG membership change of a lockspace's group becomes a *change*: the kernel
//! lockspace is stopped at once; when the change's conditions hold (ring ids agree, quorum,
//! fencing of failed nodes done) each member multicasts START for it; when STARTs from every
//! member have been matched, the kernel is started with the change's members and every
//! older pending change is folded into it. Decisions and messages are the C daemon's so C
//! and Rust nodes can run one lockspace (daemon-spec §2.6, §2.8).
//!
//! Inputs: [`Membership::handle_confchg`], [`Membership::handle_totem`],
//! [`Membership::handle_start`], and [`Membership::poll`] (the once-a-second retry of a
//! waiting change). Each returns the [`Action`]s to perform, in order. The environment
//! (time, quorum, fencing) comes in as an [`Env`].

use std::collections::BTreeMap;

use dlm_cpg::Reason;
use dlm_proto::query::WaitCondition;
use dlm_proto::wire::{Change as StartBody, HeaderFlags, Incarnation};

use crate::confchg::Confchg;
use crate::log::PLOCK_DEBUG_TARGET;

/// What the daemon must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write `control` = 0 (`stop_kernel`).
    StopKernel,
    /// Drop the plocks of a node that left or failed (`purge_plocks`).
    PurgePlocks(u32),
    /// A member's daemon died while its corosync lives: ask corosync to kill that node.
    KickNode(u32),
    /// Multicast START (or a NACK for an older identical change) for change `seq`.
    SendStart {
        /// Change sequence (`msgdata`).
        seq: u32,
        /// `DLM_MFLG_*` (JOINING, HAVEPLOCK, NACK).
        flags: u32,
        /// The `ls_info` + member ids body.
        body: StartBody,
    },
    /// `start_kernel`: write `id` (when joining), configfs members (renewing `renew`),
    /// `control` = 1, then `event_done` = 0 when joining.
    StartKernel {
        /// Change sequence started.
        seq: u32,
        /// Write the global id first (first start of a join).
        write_id: bool,
        /// Members, in CPG order.
        members: Vec<u32>,
        /// Members that left and came back since the last start: recreate their dirs.
        renew: Vec<u32>,
        /// Write `event_done` = 0 (the join completes).
        event_done: bool,
    },
    /// After the kernel start, plock state: who is the data node and whether nodes joined
    /// (`prepare_plocks`; acted on by the plock path).
    Started {
        /// Lowest member whose START said it has plock state, 0 if none; us when alone.
        plock_data_node: u32,
        /// A pending change folded into this start added nodes.
        nodes_added: bool,
        /// We still need plock state (a joiner).
        need_plocks: bool,
    },
    /// Our own leave completed: stop, remove configfs members, `event_done` = 0, and
    /// forget the lockspace.
    Left,
}

/// The world around one lockspace at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Env<'a> {
    /// Monotonic seconds.
    pub now: u64,
    /// Ring sequence of the quorum service.
    pub cluster_ring_seq: u64,
    /// The cluster is quorate.
    pub quorate: bool,
    /// `enable_quorum_lockspace`.
    pub quorum_required: bool,
    /// `enable_fencing`.
    pub fencing_enabled: bool,
    /// Fencing facts from the daemon level.
    pub fencing: &'a dyn FenceView,
}

/// What the daemon knows about fencing and cluster membership.
pub trait FenceView: std::fmt::Debug {
    /// Monotonic time the node was last fenced (or acknowledged), if ever.
    fn fence_time(&self, nodeid: u32) -> Option<u64>;
    /// That time records the node rejoining cleanly (it needed fencing and came back as a
    /// clean daemon member), not a fence: it vouches for failures before it only.
    fn fenced_by_rejoin(&self, _nodeid: u32) -> bool {
        false
    }
    /// Some fencing is still in progress anywhere (`fence_in_progress`).
    fn in_progress(&self) -> bool;
    /// Monotonic time the node joined the cluster (quorum callback).
    fn cluster_add_time(&self, nodeid: u32) -> u64;
}

/// A world in which no node ever waits for fencing: every node counts as fenced long ago,
/// nothing is in progress (the tests and the fuzz harness of a lockspace's core use it).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFencing;

impl FenceView for NoFencing {
    fn fence_time(&self, _: u32) -> Option<u64> {
        Some(u64::MAX)
    }
    fn in_progress(&self) -> bool {
        false
    }
    fn cluster_add_time(&self, _: u32) -> u64 {
        0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Memb {
    nodeid: u32,
    /// Its daemon's CPG process id in this change (0: not known).
    pid: u32,
    start: bool,
    added: bool,
    failed: bool,
    disallowed: bool,
    start_flags: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Copy)]
enum State {
    WaitConditions,
    WaitMessages,
}

#[derive(Debug, Clone)]
struct Change {
    seq: u32,
    member_count: i32,
    joined_count: i32,
    remove_count: i32,
    failed_count: i32,
    members: Vec<Memb>,
    removed: Vec<Memb>,
    state: State,
    create_time: u64,
    combined_seq: u32,
}

/// The START describes change `cg`: the same counts, members and (where it names them)
/// incarnations (`match_change`'s last checks).
fn describes(cg: &Change, body: &StartBody, our: u32, nonce: u32) -> bool {
    let counts = (
        body.member_count,
        body.joined_count,
        body.remove_count,
        body.failed_count,
    );
    counts == (cg.member_count, cg.joined_count, cg.remove_count, cg.failed_count)
        && body
            .members
            .iter()
            .all(|&m| u32::try_from(m).is_ok_and(|m| cg.memb(m).is_some()))
        // a START for a change of the same nodes with another time of one of them in the
        // lockspace: sent before that node's daemon restarted, or left and joined again
        // (C, which knows only nodeids, takes it for the new change: a joiner starts early)
        && same_incarnations(cg, body, our, nonce)
}

/// The START's incarnations, where it carries them (a daemon of ours), are those of the
/// change: each member's process id is the one the change names wherever both sides know
/// it (a START is for one confchg, which names the same processes on every member), and
/// the sender knows us by our nonce or not at all (it saw us leave or join since it knew
/// another).
fn same_incarnations(cg: &Change, body: &StartBody, our: u32, nonce: u32) -> bool {
    body.members
        .iter()
        .zip(&body.incarnations)
        .all(|(&m, inc)| {
            let m = u32::try_from(m).unwrap_or(0);
            let known = cg.memb(m).map_or(0, |m| m.pid);
            let pid = known == 0 || inc.pid == 0 || known == inc.pid;
            pid && (m != our || inc.nonce == 0 || inc.nonce == nonce)
        })
}

impl Change {
    fn memb(&self, nodeid: u32) -> Option<&Memb> {
        self.members.iter().find(|m| m.nodeid == nodeid)
    }

    fn memb_mut(&mut self, nodeid: u32) -> Option<&mut Memb> {
        self.members.iter_mut().find(|m| m.nodeid == nodeid)
    }
}

/// A change as queries report it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChangeInfo {
    /// Members.
    pub member_count: i32,
    /// Joined.
    pub joined_count: i32,
    /// Removed.
    pub remove_count: i32,
    /// Failed.
    pub failed_count: i32,
    /// Its seq.
    pub seq: u32,
    /// The oldest change folded into it (started) or the oldest pending one (next).
    pub combined_seq: u32,
    /// Waiting for START messages.
    pub wait_messages: bool,
    /// Member nodeids, in CPG order.
    pub members: Vec<u32>,
}

/// Per-node history of the lockspace (`struct node`).
#[derive(Debug, Clone, Default)]
pub struct NodeHistory {
    /// Member now.
    pub member: bool,
    /// Change seq it was added in.
    pub add_seq: u32,
    /// Change seq it was removed in.
    pub rem_seq: u32,
    /// Monotonic time of its last accepted START (0: none).
    pub start_time: u64,
    /// It failed after starting and must be fenced before we start again.
    pub need_fencing: bool,
    /// Monotonic time it failed.
    pub fail_monotime: u64,
    /// CPG reason it left with.
    pub fail_reason: u32,
    last_match_seq: u32,
}

/// One lockspace's membership state, on node `our_nodeid`.
#[derive(Debug, Clone)]
pub struct Membership {
    our: u32,
    /// Pending changes, oldest first (C keeps newest first).
    changes: Vec<Change>,
    started: Option<Change>,
    started_count: u32,
    change_seq: u32,
    history: BTreeMap<u32, NodeHistory>,
    kernel_stopped: bool,
    joining: bool,
    leaving: bool,
    /// We run native mode: our START says so (docs/native-mode.md).
    native: bool,
    /// `plock_deadlock_detect=1`: our START says so (and offers no native mode).
    deadlock: bool,
    /// `c_peers_apply_cancel=1`: our START says the C members apply CANCEL.
    c_peers_cancel: bool,
    /// START flags we leave out (the simulations play a daemon of ours that predates them).
    withheld: u32,
    /// The number we drew for this time in the lockspace (never 0), in our START's entry.
    nonce: u32,
    /// The other members' nonces, from their STARTs, for their current time.
    nonces: BTreeMap<u32, u32>,
    /// The data node of the last `prepare_plocks` (C's `plock_data_node`; 0 before).
    plock_data_node: u32,
    need_plocks: bool,
    cpg_ring_seq: u64,
    ring_wait: bool,
    wait: WaitCondition,
}

impl Membership {
    /// A lockspace we are joining (`dlm_join_lockspace`): kernel stopped, joining.
    pub fn joining(our_nodeid: u32) -> Self {
        Self {
            our: our_nodeid,
            changes: Vec::new(),
            started: None,
            started_count: 0,
            change_seq: 0,
            history: BTreeMap::new(),
            kernel_stopped: true,
            joining: true,
            leaving: false,
            need_plocks: true,
            native: true,
            deadlock: false,
            c_peers_cancel: false,
            withheld: 0,
            nonce: 1,
            nonces: BTreeMap::new(),
            plock_data_node: 0,
            cpg_ring_seq: 0,
            ring_wait: false,
            wait: WaitCondition::None,
        }
    }

    /// [`Self::joining`], with the nonce the caller drew for this time in the lockspace
    /// (0 counts as 1).
    pub fn joining_as(our_nodeid: u32, nonce: u32) -> Self {
        Self {
            nonce: nonce.max(1),
            ..Self::joining(our_nodeid)
        }
    }

    /// Whether our STARTs offer native mode (`plock_native`; on unless turned off).
    pub fn set_native(&mut self, on: bool) {
        self.native = on;
    }

    /// Our STARTs leave out `flags`, as a daemon of ours from before them does: the
    /// simulations mix versions of ours (a rolling upgrade) this way.
    pub fn withhold_start_flags(&mut self, flags: u32) {
        self.withheld = flags;
    }

    /// Whether our STARTs offer deadlock detection (`plock_deadlock_detect`); they then
    /// offer no native mode: a local decision would hide waits the detection depends on.
    pub fn set_deadlock(&mut self, on: bool) {
        self.deadlock = on;
    }

    /// Whether our STARTs say the C members apply CANCEL (`c_peers_apply_cancel`).
    pub fn set_c_peers_cancel(&mut self, on: bool) {
        self.c_peers_cancel = on;
    }

    /// Whether the started change applies plock CANCEL, on every replica alike: all its
    /// members are ours, or every member of ours says the C members apply it too. A C 4.2
    /// member keeps the waiter, a C 4.3 one removes it, and the wire does not tell which.
    pub fn started_applies_cancel(&self) -> bool {
        let Some(c) = self.started.as_ref() else {
            return false;
        };
        let ours = |f: u32| f & HeaderFlags::CANCEL_AWARE != 0;
        c.members.iter().all(|m| ours(m.start_flags))
            || c.members
                .iter()
                .all(|m| !ours(m.start_flags) || m.start_flags & HeaderFlags::C_PEERS_CANCEL != 0)
    }

    /// Whether a CANCEL multicast by `from` is applied: by the rule above, or whenever its
    /// sender is ours (ours multicast CANCEL only while the rule held, so if a change let a
    /// C member in since, removing the waiter as the originator did can leave at most a
    /// lock nobody holds on that member's replica, never a held lock missing from ours).
    pub fn started_applies_cancel_from(&self, from: u32) -> bool {
        self.started_applies_cancel()
            || self.started.as_ref().is_some_and(|c| {
                c.members
                    .iter()
                    .any(|m| m.nodeid == from && m.start_flags & HeaderFlags::CANCEL_AWARE != 0)
            })
    }

    /// We asked to leave (`dlm_leave_lockspace`); the leave completes at our confchg.
    pub fn leave(&mut self) {
        tracing::debug!("leave_lockspace");
        self.leaving = true;
    }

    /// What the newest pending change waits for (`wait_debug`).
    pub fn wait_condition(&self) -> WaitCondition {
        self.wait
    }

    /// Members of the started change, in CPG order.
    pub fn started_members(&self) -> Vec<u32> {
        self.started
            .as_ref()
            .map(|c| c.members.iter().map(|m| m.nodeid).collect())
            .unwrap_or_default()
    }

    /// The started change as START/PLOCKS_DONE carry it (for PLOCKS_DONE), with its seq.
    pub fn started_body(&self) -> Option<(u32, StartBody)> {
        self.started.as_ref().map(|c| (c.seq, self.body(c)))
    }

    /// The started and newest pending changes as `dlm_tool ls` shows them
    /// (`set_lockspace_info`): counts, seqs, and what the pending change waits for.
    pub fn query_changes(&self) -> (Option<ChangeInfo>, Option<ChangeInfo>) {
        let info = |c: &Change, combined: u32, waiting: bool| ChangeInfo {
            member_count: c.member_count,
            joined_count: c.joined_count,
            remove_count: c.remove_count,
            failed_count: c.failed_count,
            seq: c.seq,
            combined_seq: combined,
            wait_messages: waiting && c.state == State::WaitMessages,
            members: c.members.iter().map(|m| m.nodeid).collect(),
        };
        let prev = self
            .started
            .as_ref()
            .map(|c| info(c, c.combined_seq, false));
        let next = self
            .changes
            .last()
            .map(|c| info(c, self.changes.first().map_or(c.seq, |o| o.seq), true));
        (prev, next)
    }

    /// We are still joining (no kernel start yet).
    pub fn is_joining(&self) -> bool {
        self.joining
    }

    /// We asked to leave.
    pub fn is_leaving(&self) -> bool {
        self.leaving
    }

    /// Number of kernel starts (`started_count`).
    pub fn started_count(&self) -> u32 {
        self.started_count
    }

    /// Pending changes.
    pub fn pending(&self) -> usize {
        self.changes.len()
    }

    /// The START flags of each member of the started change.
    pub fn started_flags(&self) -> Vec<(u32, u32)> {
        self.started
            .as_ref()
            .map(|c| {
                c.members
                    .iter()
                    .map(|m| (m.nodeid, m.start_flags))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every member of the started change sent `bit` in its START (false before any start).
    pub fn started_members_have(&self, bit: u32) -> bool {
        self.started
            .as_ref()
            .is_some_and(|c| c.members.iter().all(|m| m.start_flags & bit == bit))
    }

    /// The kernel lockspace is stopped.
    pub fn kernel_stopped(&self) -> bool {
        self.kernel_stopped
    }

    /// Node history (queries, fencing).
    pub fn history(&self) -> &BTreeMap<u32, NodeHistory> {
        &self.history
    }

    /// The plock transfer finished (or was not needed): HAVEPLOCK from now on.
    pub fn plocks_ready(&mut self) {
        self.need_plocks = false;
    }

    /// `confchg_cb`: a membership change of the lockspace group.
    pub fn handle_confchg(&mut self, env: &Env<'_>, cc: &Confchg) -> Vec<Action> {
        let (members, left, joined) = (&cc.members[..], &cc.left[..], &cc.joined[..]);
        let mut fx = Vec::new();
        if self.leaving && left.iter().any(|(n, _)| *n == self.our) {
            // our own leave: the final callback
            tracing::debug!("confchg for our leave");
            if !self.kernel_stopped {
                fx.push(Action::StopKernel);
                self.kernel_stopped = true;
            }
            fx.push(Action::Left);
            return fx;
        }
        // add_change
        let mut cg = self.new_change(env, members, left, joined);
        for (m, &pid) in cg.members.iter_mut().zip(&cc.pids) {
            m.pid = pid;
        }
        // a node that leaves or joins starts a time we know no nonce of
        for n in cc.joined.iter().chain(left.iter().map(|(n, _)| n)) {
            self.nonces.remove(n);
        }
        self.change_removed(env, &mut cg, left, &mut fx);
        self.change_joined(&mut cg, members, joined);
        tracing::debug!(
            cg = cg.seq,
            member = cg.member_count,
            joined = cg.joined_count,
            remove = cg.remove_count,
            failed = cg.failed_count,
            "add_change cg {} counts member {} joined {} remove {} failed {}",
            cg.seq,
            cg.member_count,
            cg.joined_count,
            cg.remove_count,
            cg.failed_count
        );
        let removed: Vec<u32> = cg.removed.iter().map(|m| m.nodeid).collect();
        self.changes.push(cg);
        // stop_kernel, then purge the plocks of every removed node, then apply
        if !self.kernel_stopped {
            fx.push(Action::StopKernel);
            self.kernel_stopped = true;
        }
        fx.extend(removed.into_iter().map(Action::PurgePlocks));
        self.apply_changes(env, &mut fx);
        fx
    }

    /// `add_change`'s new change: the next sequence number, the members and the counts.
    fn new_change(
        &mut self,
        env: &Env<'_>,
        members: &[u32],
        left: &[(u32, Reason)],
        joined: &[u32],
    ) -> Change {
        self.change_seq = self.change_seq.wrapping_add(1);
        if self.change_seq == 0 {
            self.change_seq = 1;
        }
        Change {
            seq: self.change_seq,
            member_count: i32::try_from(members.len()).unwrap_or(i32::MAX),
            joined_count: i32::try_from(joined.len()).unwrap_or(i32::MAX),
            remove_count: i32::try_from(left.len()).unwrap_or(i32::MAX),
            failed_count: 0,
            members: members
                .iter()
                .map(|&nodeid| Memb {
                    nodeid,
                    ..Memb::default()
                })
                .collect(),
            removed: Vec::new(),
            state: State::WaitConditions,
            create_time: env.now,
            combined_seq: 0,
        }
    }

    /// `add_change` for the nodes that left: failed or not, their history, a kick for a
    /// node whose daemon died (PROCDOWN).
    fn change_removed(
        &mut self,
        env: &Env<'_>,
        cg: &mut Change,
        left: &[(u32, Reason)],
        fx: &mut Vec<Action>,
    ) {
        for &(nodeid, reason) in left {
            let failed = crate::confchg::failed(reason);
            tracing::debug!(
                cg = cg.seq,
                nodeid,
                reason = reason.to_raw(),
                "add_change cg {} remove nodeid {nodeid} reason {}",
                cg.seq,
                reason.name()
            );
            if failed {
                cg.failed_count += 1;
            }
            if reason == Reason::NodeDown {
                self.ring_wait = true;
            }
            cg.removed.push(Memb {
                nodeid,
                failed,
                ..Memb::default()
            });
            if let Some(h) = self.history.get_mut(&nodeid) {
                h.member = false;
                h.rem_seq = cg.seq;
                if failed {
                    if env.fencing_enabled && h.start_time != 0 {
                        h.need_fencing = true;
                    }
                    h.fail_monotime = env.now;
                    h.fail_reason = reason.to_raw();
                } else {
                    h.start_time = 0;
                }
            }
            if reason == Reason::ProcDown {
                fx.push(Action::KickNode(nodeid));
            }
        }
    }

    /// `add_change` for the nodes that joined (every member is new to us when we joined).
    fn change_joined(&mut self, cg: &mut Change, members: &[u32], joined: &[u32]) {
        let mut we_joined = false;
        for &nodeid in joined {
            tracing::debug!(
                cg = cg.seq,
                nodeid,
                "add_change cg {} joined nodeid {nodeid}",
                cg.seq
            );
            if let Some(m) = cg.memb_mut(nodeid) {
                m.added = true;
            }
            if nodeid == self.our {
                we_joined = true;
            } else {
                self.history_add(nodeid, cg.seq);
            }
        }
        if we_joined {
            for &nodeid in members {
                self.history_add(nodeid, cg.seq);
            }
        }
    }

    fn history_add(&mut self, nodeid: u32, seq: u32) {
        let h = self.history.entry(nodeid).or_default();
        h.add_seq = seq;
        h.member = true;
    }

    /// `totem_cb`: the group's ring changed.
    pub fn handle_totem(&mut self, env: &Env<'_>, ring_seq: u64) -> Vec<Action> {
        self.cpg_ring_seq = ring_seq;
        self.ring_wait = false;
        let mut fx = Vec::new();
        self.apply_changes(env, &mut fx);
        fx
    }

    /// A condition may have changed (quorum, fencing): retry the waiting change.
    pub fn poll(&mut self, env: &Env<'_>) -> Vec<Action> {
        let mut fx = Vec::new();
        self.apply_changes(env, &mut fx);
        fx
    }

    /// `receive_start`: a START (or NACK) from `from` for its change `seq`.
    pub fn handle_start(
        &mut self,
        env: &Env<'_>,
        from: u32,
        flags: u32,
        seq: u32,
        body: &StartBody,
    ) -> Vec<Action> {
        let mut fx = Vec::new();
        tracing::debug!(
            from,
            seq,
            flags,
            "receive_start {from}:{seq} flags {flags:x} counts {} {} {} {} {}",
            body.started_count,
            body.member_count,
            body.joined_count,
            body.remove_count,
            body.failed_count
        );
        if let Some(i) = self.find_change(env, from, flags, body) {
            tracing::debug!(
                from,
                seq,
                cg = self.changes[i].seq,
                "match_change {from}:{seq} matches cg {}",
                self.changes[i].seq
            );
            let added = self
                .changes
                .iter()
                .any(|c| c.memb(from).is_some_and(|m| m.added));
            let ours = self.started_count;
            let theirs = body
                .members
                .iter()
                .zip(&body.incarnations)
                .find(|(m, _)| u32::try_from(**m).ok() == Some(from))
                .map_or(0, |(_, inc)| inc.nonce);
            if theirs != 0 {
                self.nonces.insert(from, theirs);
            }
            let cg = &mut self.changes[i];
            if let Some(m) = cg.memb_mut(from) {
                m.start_flags = flags;
                if added && body.started_count != 0 && ours != 0 {
                    // a node that ran the lockspace elsewhere: a merged partition
                    m.disallowed = true;
                } else if flags & HeaderFlags::NACK == 0 {
                    m.start = true;
                    if let Some(h) = self.history.get_mut(&from) {
                        h.start_time = env.now.max(1);
                    }
                }
            }
        }
        self.apply_changes(env, &mut fx);
        fx
    }

    /// `find_change`: the oldest pending change the message matches.
    fn find_change(
        &mut self,
        env: &Env<'_>,
        from: u32,
        flags: u32,
        body: &StartBody,
    ) -> Option<usize> {
        let change_seq = self.change_seq;
        // a node that joined in a pending change sent nothing for an older one: anything
        // from its previous time in the lockspace came before its leave (C would match its
        // first START to an older change of the same counts, and the newest then waits for
        // that START for ever)
        let joined_at = self
            .changes
            .iter()
            .filter(|c| c.memb(from).is_some_and(|m| m.added))
            .map(|c| c.seq)
            .max()
            .unwrap_or(0);
        if !body
            .members
            .iter()
            .any(|&m| u32::try_from(m).ok() == Some(self.our))
        {
            return None; // we are not in its members: a change from before our join
        }
        for i in 0..self.changes.len() {
            let cg = &self.changes[i];
            let Some(memb) = cg.memb(from) else { continue };
            if cg.seq < joined_at {
                continue;
            }
            if memb.start_flags & HeaderFlags::NACK != 0 {
                continue;
            }
            if memb.start && flags & HeaderFlags::NACK == 0 {
                continue;
            }
            if flags & HeaderFlags::NACK != 0 && i + 1 == self.changes.len() {
                // a NACK is sent for a change older than its sender's newest, in the
                // configuration of that newest one: never for our newest (C lets it
                // match here, and the START that follows it then matches nothing)
                continue;
            }
            let Some(node) = self.history.get(&from) else {
                continue;
            };
            if env.fencing.cluster_add_time(from) > cg.create_time && flags & HeaderFlags::NACK == 0
            {
                continue;
            }
            if node.last_match_seq > cg.seq {
                continue;
            }
            if !describes(cg, body, self.our, self.nonce) {
                continue;
            }
            if cg.seq == 1 && change_seq == 1 && flags & HeaderFlags::NACK != 0 {
                continue;
            }
            let seq = cg.seq;
            if let Some(n) = self.history.get_mut(&from) {
                n.last_match_seq = seq;
            }
            return Some(i);
        }
        None
    }

    fn check_fencing_done(&mut self, env: &Env<'_>) -> bool {
        if !env.fencing_enabled {
            return true;
        }
        let mut waiting = false;
        for (&nodeid, h) in &mut self.history {
            if !h.need_fencing {
                continue;
            }
            // check_fencing_done: fenced at or after the failure. Times are in seconds, so a
            // clean rejoin noted in the same second as the failure does not count (C counts
            // it, and then never fences a node that failed right after rejoining)
            let by_rejoin = env.fencing.fenced_by_rejoin(nodeid);
            match env.fencing.fence_time(nodeid) {
                Some(t) if t > h.fail_monotime || (t == h.fail_monotime && !by_rejoin) => {
                    h.need_fencing = false;
                    h.start_time = 0;
                }
                _ => waiting = true,
            }
        }
        !waiting && !env.fencing.in_progress()
    }

    fn wait_conditions_done(&mut self, env: &Env<'_>) -> bool {
        if self.ring_wait || env.cluster_ring_seq != self.cpg_ring_seq {
            self.wait = WaitCondition::Ringid;
            return false;
        }
        if env.quorum_required && !env.quorate {
            if self.wait != WaitCondition::Quorum {
                tracing::debug!("wait for quorum");
            }
            self.wait = WaitCondition::Quorum;
            return false;
        }
        if !self.check_fencing_done(env) {
            if self.wait != WaitCondition::Fencing {
                let nodes: Vec<u32> = self
                    .history
                    .iter()
                    .filter(|(_, h)| h.need_fencing)
                    .map(|(n, _)| *n)
                    .collect();
                tracing::debug!(?nodes, "wait for fencing of {nodes:?}");
            }
            self.wait = WaitCondition::Fencing;
            return false;
        }
        self.wait = WaitCondition::None;
        true
    }

    fn body(&self, cg: &Change) -> StartBody {
        StartBody {
            started_count: self.started_count,
            member_count: cg.member_count,
            joined_count: cg.joined_count,
            remove_count: cg.remove_count,
            failed_count: cg.failed_count,
            members: cg
                .members
                .iter()
                .map(|m| i32::try_from(m.nodeid).unwrap_or(0))
                .collect(),
            // C steps over them; a change whose process ids we do not all know sends none
            incarnations: if cg.members.iter().all(|m| m.pid != 0) {
                cg.members
                    .iter()
                    .map(|m| Incarnation {
                        pid: m.pid,
                        nonce: if m.nodeid == self.our {
                            self.nonce
                        } else {
                            self.nonces.get(&m.nodeid).copied().unwrap_or(0)
                        },
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// `apply_changes` on the newest pending change.
    fn apply_changes(&mut self, env: &Env<'_>, fx: &mut Vec<Action>) {
        let Some(newest) = self.changes.len().checked_sub(1) else {
            return;
        };
        match self.changes[newest].state {
            State::WaitConditions => {
                if !self.wait_conditions_done(env) {
                    return;
                }
                // send_nacks: older pending changes identical to this one — but none as
                // old as a change we sent a START for: its START set our last match on
                // every member past it, so the NACK would match this change instead (C
                // sends it, and a lockspace where a node failed while another joined then
                // never starts)
                let start = &self.changes[newest];
                let started_at = self.changes[..newest]
                    .iter()
                    .filter(|c| c.state == State::WaitMessages)
                    .map(|c| c.seq)
                    .max()
                    .unwrap_or(0);
                for old in self.changes[..newest].iter().filter(|c| c.seq > started_at) {
                    let same = old.member_count == start.member_count
                        && old.joined_count == start.joined_count
                        && old.remove_count == start.remove_count
                        && old.failed_count == start.failed_count
                        && old.members.iter().all(|m| start.memb(m.nodeid).is_some());
                    if same {
                        fx.push(Action::SendStart {
                            seq: old.seq,
                            flags: HeaderFlags::NACK | self.start_flags(),
                            body: self.body(old),
                        });
                    }
                }
                let body = self.body(start);
                tracing::debug!(
                    cg = start.seq,
                    "send_start {}:{} counts {} {} {} {} {}",
                    self.our,
                    start.seq,
                    body.started_count,
                    body.member_count,
                    body.joined_count,
                    body.remove_count,
                    body.failed_count
                );
                fx.push(Action::SendStart {
                    seq: start.seq,
                    flags: self.start_flags(),
                    body,
                });
                self.changes[newest].state = State::WaitMessages;
            }
            State::WaitMessages => {
                let need = self.changes[newest]
                    .members
                    .iter()
                    .filter(|m| !m.start)
                    .count();
                if need > 0 {
                    let total = self.changes[newest].members.len();
                    let cg = self.changes[newest].seq;
                    tracing::debug!(
                        cg,
                        need,
                        total,
                        "wait_messages cg {cg} need {need} of {total}"
                    );
                    self.wait = WaitCondition::Other(i32::try_from(need).unwrap_or(i32::MAX));
                    return;
                }
                self.wait = WaitCondition::None;
                self.start_kernel(fx);
                self.prepare_plocks(fx);
                self.cleanup_changes();
            }
        }
    }

    fn start_flags(&self) -> u32 {
        let mut f = HeaderFlags::CANCEL_AWARE;
        if self.deadlock {
            f |= HeaderFlags::DEADLOCK_AWARE;
        } else if self.native {
            f |= HeaderFlags::NATIVE2 | HeaderFlags::NATIVE_SYNC;
        }
        if self.c_peers_cancel {
            f |= HeaderFlags::C_PEERS_CANCEL;
        }
        if self.joining {
            f |= HeaderFlags::JOINING;
        }
        if !self.need_plocks {
            f |= HeaderFlags::HAVEPLOCK;
        }
        f & !self.withheld
    }

    /// `start_kernel`
    fn start_kernel(&mut self, fx: &mut Vec<Action>) {
        if !self.kernel_stopped {
            return;
        }
        let Some((start, older)) = self.changes.split_last() else {
            return;
        };
        let members: Vec<u32> = start.members.iter().map(|m| m.nodeid).collect();
        let renew: Vec<u32> = members
            .iter()
            .copied()
            .filter(|n| {
                older
                    .iter()
                    .any(|c| c.removed.iter().any(|r| r.nodeid == *n))
            })
            .collect();
        tracing::debug!(
            cg = start.seq,
            member_count = members.len(),
            "start_kernel cg {} member_count {}",
            start.seq,
            members.len()
        );
        fx.push(Action::StartKernel {
            seq: start.seq,
            write_id: self.joining,
            members,
            renew,
            event_done: self.joining,
        });
        self.kernel_stopped = false;
        self.joining = false;
    }

    /// `prepare_plocks` (the decision; the transfer itself belongs to the plock path)
    fn prepare_plocks(&mut self, fx: &mut Vec<Action>) {
        let Some(start) = self.changes.last() else {
            return;
        };
        tracing::debug!(target: PLOCK_DEBUG_TARGET, "prepare_plocks");
        let nodes_added = self.changes.iter().any(|c| c.joined_count > 0);
        let data_node = if start.member_count == 1 {
            self.need_plocks = false;
            self.our
        } else {
            // set_plock_data_node: the lowest member whose START says it has plock state
            let low = start
                .members
                .iter()
                .filter(|m| m.start_flags & HeaderFlags::HAVEPLOCK != 0)
                .map(|m| m.nodeid)
                .min()
                .unwrap_or(0);
            tracing::debug!(
                target: PLOCK_DEBUG_TARGET,
                data_node = low,
                need_plocks = self.need_plocks,
                "set_plock_data_node from {} to {low}",
                self.plock_data_node
            );
            low
        };
        self.plock_data_node = data_node;
        if data_node == 0 {
            self.need_plocks = false;
        }
        fx.push(Action::Started {
            plock_data_node: data_node,
            nodes_added,
            need_plocks: self.need_plocks,
        });
    }

    /// `cleanup_changes`: the newest change becomes the started one; older ones fold in.
    fn cleanup_changes(&mut self) {
        let Some(mut start) = self.changes.pop() else {
            return;
        };
        self.started_count = self.started_count.wrapping_add(1);
        if self.started_count == 0 {
            self.started_count = 1;
        }
        start.combined_seq = self.changes.first().map_or(start.seq, |c| c.seq);
        self.changes.clear();
        self.started = Some(start);
    }
}
