//! A whole cluster as one value: every node's `LsCore` (the daemon's own lockspace logic),
//! the messages it sent that the bus has not ordered yet, the events delivered to it that
//! it has not handled yet, and its processes' model. Everything any node, the bus or the
//! world does is one [`Step`], faults (crash, leave, join, partition and merge, a C-
//! compatible joiner, a daemon of ours from before SYNC) included, so a fault may come
//! between any two steps with anything in flight. A world can be cloned and fingerprinted:
//! `native_explore.rs` tries every order of the steps of a small cluster, `native_faults.rs`
//! lets a seed pick them for larger ones. A broken invariant panics, naming it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::{Hash, Hasher};

use dlm_controld::daemon_core::FenceFacts;
use dlm_controld::lscore::{Action, LsCore, LsEnv};
use dlm_controld::native::Limits;
use dlm_cpg::{Event, Member, Reason, RingId};
use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::query::LockspaceFlags;
use dlm_proto::wire::{Body, HeaderFlags, Message, NativeKind};

use crate::procs::{Procs, grants_clash, mask, table_clash};

/// What a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// This daemon, native mode on.
    Ours,
    /// This daemon with `plock_native=0`: its STARTs lack NATIVE, as a C daemon's do, so
    /// every lockspace it is in is C-compatible.
    Plain,
    /// A daemon of ours from before native mode's current rules: its STARTs lack NATIVE2
    /// and NATIVE_SYNC (every lockspace it is in is C-compatible), and its decoder
    /// refuses a whole batch with a SYNC or SYNCED entry.
    Older,
}

/// One node.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) id: u32,
    pub(crate) kind: Kind,
    pub(crate) core: LsCore,
    /// Its process id in the lockspace's group while it is a member.
    pub(crate) pid: Option<u32>,
    /// Its daemon's process id (a clean leave keeps it for the next join).
    pub(crate) daemon: u32,
    /// The side of a partition it is on (0 when whole).
    pub(crate) side: u32,
    /// Delivered, not yet handled.
    pub(crate) inbox: VecDeque<Event>,
    /// Multicast, not yet ordered.
    pub(crate) outbox: VecDeque<Vec<u8>>,
    /// What its processes asked and were told.
    pub(crate) procs: Procs,
    /// Plock dumps that waited and may now be made.
    pub(crate) fresh: u32,
    /// Its leave completed.
    pub(crate) left: bool,
    /// It failed (and so joins the cluster again before it can join the lockspace).
    pub(crate) crashed: bool,
}

/// One step of a node, of the bus or of the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The bus orders the oldest message node `n` sent: every member on its side gets it.
    Order(u32),
    /// Node `n` handles the oldest event delivered to it.
    Handle(u32),
    /// Node `n` ends a loop turn: its batch goes out.
    Flush(u32),
    /// Node `n`'s sync timer: the STATEs of its decisions go out.
    Sync(u32),
    /// Node `n` sends the next portion of its table to a joiner.
    Pump(u32),
    /// Node `n`'s once-a-second poll.
    Poll(u32),
    /// Node `n`'s kernel hands it request `serial`.
    Ask(u32, u32, PlockInfo),
    /// A plock dump is asked for on node `n`.
    Dump(u32),
    /// Node `n` joins the lockspace, running `Kind`.
    Join(u32, Kind),
    /// Node `n`'s kernel released the lockspace: it leaves the group.
    Leave(u32),
    /// Node `n` fails.
    Crash(u32),
    /// Node `n` is cut off from the others (a minority of one, side 1).
    Split(u32),
    /// The partition heals: the minority is killed (a stateful merge) and fenced as failed.
    Heal,
    /// The fencing of failed node `n` completes.
    Fence(u32),
    /// Time passes (ms).
    Tick(u64),
}

/// The cluster.
#[derive(Debug, Clone)]
pub(crate) struct World {
    pub(crate) seed: u64,
    pub(crate) peers: BTreeMap<u32, Peer>,
    /// Nodes in the cluster (quorum counts them).
    pub(crate) configured: u32,
    pub(crate) clock_ms: u64,
    pub(crate) fence: FenceFacts,
    /// Lockspaces wait for failed nodes to be fenced.
    pub(crate) fencing: bool,
    /// Failed nodes not fenced yet.
    pub(crate) unfenced: BTreeSet<u32>,
    ring: u64,
    next_pid: u32,
    /// Lockspace joins so far (each draws its own seed).
    joins: u32,
    /// The last request serial given out.
    pub(crate) serial: u32,
    pub(crate) limits: Limits,
    /// Every node runs `plock_deadlock_detect=1`.
    pub(crate) deadlock: bool,
}

const NAME: &[u8] = b"sim";

/// `payload` is a NATIVE batch with a SYNC or SYNCED entry.
fn has_sync(payload: &[u8]) -> bool {
    match Message::decode(payload) {
        Ok(Message {
            body: Body::Native(b),
            ..
        }) => b
            .entries()
            .any(|e| matches!(e.kind, NativeKind::Sync | NativeKind::Synced)),
        _ => false,
    }
}

impl Peer {
    /// It applies what it is delivered (not a joiner before its snapshot point).
    fn applies(&self) -> bool {
        let f = self.core.report().info.flags.0;
        f & LockspaceFlags::NEED_PLOCKS == 0 || f & LockspaceFlags::SAVE_PLOCKS != 0
    }

    /// A member with its table, started.
    pub(crate) fn started(&self) -> bool {
        let f = self.core.report().info.flags.0;
        self.pid.is_some()
            && f & (LockspaceFlags::NEED_PLOCKS | LockspaceFlags::KERNEL_STOPPED) == 0
    }

    fn member(&self) -> Option<Member> {
        self.pid.map(|pid| Member {
            nodeid: self.id,
            pid,
            reason: Reason::Join,
        })
    }
}

impl World {
    /// `configured` nodes in the cluster, none in the lockspace yet.
    pub(crate) fn new(seed: u64, configured: u32) -> Self {
        Self {
            seed,
            peers: BTreeMap::new(),
            configured,
            clock_ms: 1000,
            fence: FenceFacts::default(),
            fencing: false,
            unfenced: BTreeSet::new(),
            ring: 1,
            next_pid: 100,
            joins: 0,
            serial: 0,
            limits: Limits::default(),
            deadlock: false,
        }
    }

    /// A majority of the cluster's nodes is up on `side` (in the lockspace or not: a
    /// failed node is down until its fencing completes, then up again outside it).
    pub(crate) fn quorate(&self, side: u32) -> bool {
        let up = (1..=self.configured)
            .filter(|n| !self.unfenced.contains(n))
            .filter(|n| self.peers.get(n).map_or(0, |p| p.side) == side)
            .count();
        2 * u32::try_from(up).unwrap_or(0) > self.configured
    }

    /// The members on `side`, in node order.
    fn members(&self, side: u32) -> Vec<Member> {
        self.peers
            .values()
            .filter(|p| p.side == side)
            .filter_map(Peer::member)
            .collect()
    }

    /// Node `n`, which must exist.
    pub(crate) fn peer(&self, n: u32) -> &Peer {
        &self.peers[&n]
    }

    /// A request of node `n`'s process `proc` (owner `10 n + proc`), with the next serial
    /// as its pid: the step that hands it to the node's daemon.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn ask(
        &mut self,
        n: u32,
        proc: u64,
        op: PlockOp,
        ex: bool,
        wait: bool,
        number: u64,
        range: (u64, u64),
    ) -> Step {
        self.serial += 1;
        let info = PlockInfo {
            version: PLOCK_VERSION,
            op,
            ex,
            wait,
            flags: PlockFlags(0),
            pid: self.serial,
            nodeid: i32::try_from(n).unwrap_or(0),
            rv: 0,
            fsid: self.peers[&n].core.global_id(),
            number,
            start: range.0,
            end: range.1,
            owner: u64::from(n) * 10 + proc,
        };
        Step::Ask(n, self.serial, info)
    }

    /// The CLOSE of process `proc` of node `n` on file `number` (its fd closed).
    pub(crate) fn close(&mut self, n: u32, proc: u64, number: u64) -> Step {
        let Step::Ask(n, serial, info) = self.ask(
            n,
            proc,
            PlockOp::UNLOCK,
            false,
            false,
            number,
            (0, 0x7fff_ffff_ffff_ffff),
        ) else {
            unreachable!("ask makes an Ask")
        };
        let info = PlockInfo {
            flags: PlockFlags(PlockFlags::CLOSE),
            ..info
        };
        Step::Ask(n, serial, info)
    }

    /// The kernel's CANCEL of node `n`'s blocking request `serial` (its process was
    /// interrupted), if it still waits.
    pub(crate) fn cancel(&mut self, n: u32, serial: u32) -> Option<Step> {
        let procs = &self.peers[&n].procs;
        let w = procs.requests.get(&serial)?;
        let asked = procs
            .requests
            .values()
            .any(|p| p.info.op == PlockOp::CANCEL && p.info.pid == w.info.pid);
        if w.replies > 0 || w.cancelled || !w.info.wait || asked {
            return None; // the kernel cancels a wait once
        }
        let info = PlockInfo {
            op: PlockOp::CANCEL,
            wait: false,
            ..w.info
        };
        self.serial += 1;
        Some(Step::Ask(n, self.serial, info))
    }

    /// The steps the nodes and the bus can take now (not requests, not faults: the
    /// driver adds those).
    pub(crate) fn enabled(&self, poll: bool) -> Vec<Step> {
        let mut v = Vec::new();
        for p in self.peers.values() {
            let n = p.id;
            if p.pid.is_some() && !p.outbox.is_empty() {
                v.push(Step::Order(n));
            }
            if !p.inbox.is_empty() {
                v.push(Step::Handle(n));
            }
            if p.pid.is_none() {
                continue;
            }
            if p.core.batch_urgent() {
                v.push(Step::Flush(n));
            }
            if p.core.batch_pending() {
                v.push(Step::Sync(n));
            }
            if p.core.sending() {
                v.push(Step::Pump(n));
            }
            if poll {
                v.push(Step::Poll(n));
            }
        }
        v
    }

    fn env(&self, side: u32) -> LsEnv<'_> {
        LsEnv {
            now: self.clock_ms / 1000,
            now_ms: self.clock_ms,
            quorate: self.quorate(side),
            cluster_ring_seq: 0,
            quorum_required: true,
            fencing_enabled: self.fencing,
            fencing: &self.fence,
        }
    }

    /// Takes `step`; panics, naming the invariant, if one breaks.
    pub(crate) fn step(&mut self, step: &Step) {
        if std::env::var_os("DLM_SIM_TRACE").is_some() {
            eprintln!("step {step:?}");
        }
        match *step {
            Step::Order(n) => self.order(n),
            Step::Handle(n) => self.handle(n),
            Step::Flush(n) => self.with_core(n, |c, _| c.flush()),
            Step::Sync(n) => self.with_core(n, |c, e| c.sync(e.now_ms)),
            Step::Pump(n) => self.with_core(n, |c, e| c.pump(e, 2)),
            Step::Poll(n) => self.with_core(n, |c, e| c.poll(e)),
            Step::Ask(n, serial, info) => {
                self.peers
                    .get_mut(&n)
                    .expect("peer")
                    .procs
                    .asked(serial, info);
                self.with_core(n, |c, e| {
                    let mut out = Vec::new();
                    c.request(e.now_ms, &info, &mut out);
                    out
                });
            }
            Step::Dump(n) => self.with_core(n, |c, e| {
                let mut out = Vec::new();
                let _ = c.want_fresh(e.now_ms, &mut out);
                out
            }),
            Step::Join(n, kind) => self.join(n, kind),
            Step::Leave(n) => self.leave(n),
            Step::Crash(n) => self.crash(n),
            Step::Split(n) => self.split(n),
            Step::Heal => self.heal(),
            Step::Fence(n) => {
                // after the failure was seen (fencing times are in seconds)
                self.clock_ms += 1000;
                self.unfenced.remove(&n);
                self.fence.fenced.insert(n, self.clock_ms / 1000);
                self.fence.in_progress = !self.unfenced.is_empty();
            }
            Step::Tick(ms) => self.clock_ms += ms,
        }
        self.check_grants();
    }

    /// Runs `f` on node `n`'s core with its world, then performs what it returns.
    fn with_core(&mut self, n: u32, f: impl FnOnce(&mut LsCore, &LsEnv<'_>) -> Vec<Action>) {
        let side = self.peers[&n].side;
        let mut peer = self.peers.remove(&n).expect("peer");
        let actions = {
            let env = self.env(side);
            f(&mut peer.core, &env)
        };
        let minority = !self.quorate(side);
        self.perform(&mut peer, actions, minority);
        if let Err(e) = table_clash(peer.core.plocks()) {
            panic!("seed {}: node {n}'s table holds {e}", self.seed);
        }
        self.peers.insert(n, peer);
    }

    fn perform(&self, peer: &mut Peer, actions: Vec<Action>, minority: bool) {
        let seed = self.seed;
        for a in actions {
            match a {
                Action::Send(bytes) => {
                    self.check_batch(peer.id, &bytes);
                    if peer.pid.is_some() {
                        peer.outbox.push_back(bytes);
                    }
                }
                Action::Reply(info) => {
                    // cut off, a node answers nothing once it knows (its lockspace stopped
                    // at the confchg); before, an owner may still decide what it owns, as it
                    // would have a moment earlier: nobody else holds those resources, and
                    // the majority fences it before granting them
                    assert!(
                        !(minority && peer.core.kernel_stopped()),
                        "seed {seed}: node {} answered {info:?} while cut off without quorum",
                        peer.id
                    );
                    peer.procs.replied(peer.id, &info, seed);
                }
                Action::Dropped { from, why } => {
                    panic!(
                        "seed {seed}: node {} dropped a message from {from}: {why}",
                        peer.id
                    )
                }
                Action::Fresh => peer.fresh += 1,
                Action::Left => peer.left = true,
                Action::StopKernel
                | Action::StartKernel { .. }
                | Action::KickNode(_)
                | Action::TransferSent { .. }
                | Action::TransferReceived { .. } => {}
            }
        }
    }

    /// A NATIVE message holds no more entries than one message may, nor a STATE more
    /// HELD entries than one STATE may (the wire's bounds, which the tests make small):
    /// beyond them the message could not be sent.
    fn check_batch(&self, n: u32, bytes: &[u8]) {
        let Ok(Message {
            body: Body::Native(b),
            ..
        }) = Message::decode(bytes)
        else {
            return;
        };
        assert!(
            b.len() <= self.limits.batch_max,
            "seed {}: node {n} sent {} entries in one message (at most {})",
            self.seed,
            b.len(),
            self.limits.batch_max
        );
        for e in b.entries() {
            if let NativeKind::State { held } = e.kind {
                assert!(
                    usize::from(held) <= self.limits.state_max,
                    "seed {}: node {n} sent a STATE of {held} entries of resource {} (at \
                     most {})",
                    self.seed,
                    e.info.number,
                    self.limits.state_max
                );
            }
        }
    }

    fn order(&mut self, n: u32) {
        let (side, pid) = {
            let p = self.peers.get_mut(&n).expect("peer");
            (p.side, p.pid.expect("a member orders"))
        };
        let Some(payload) = self.peers.get_mut(&n).and_then(|p| p.outbox.pop_front()) else {
            return;
        };
        if std::env::var_os("DLM_SIM_TRACE").is_some() {
            let m = Message::decode(&payload).map(|m| (m.header.msg_type, m.header.msgdata));
            eprintln!("  ordered {m:?} to side {side}");
        }
        for p in self
            .peers
            .values_mut()
            .filter(|p| p.pid.is_some() && p.side == side)
        {
            p.inbox.push_back(Event::Deliver {
                nodeid: n,
                pid,
                payload: payload.clone(),
            });
        }
    }

    fn handle(&mut self, n: u32) {
        let Some(ev) = self.peers.get_mut(&n).and_then(|p| p.inbox.pop_front()) else {
            return;
        };
        let p = &self.peers[&n];
        if std::env::var_os("DLM_SIM_TRACE").is_some() {
            match &ev {
                Event::Deliver {
                    nodeid, payload, ..
                } => {
                    let m = Message::decode(payload).map(|m| (m.header.msg_type, m.header.msgdata));
                    eprintln!("  node {n} gets {m:?} from {nodeid}");
                }
                e => eprintln!("  node {n} gets {e:?}"),
            }
        }
        if let Event::Deliver { payload, .. } = &ev {
            assert!(
                !(p.kind == Kind::Older && p.applies() && has_sync(payload)),
                "seed {}: node {n}, of ours from before SYNC, was sent a SYNC or SYNCED (its \
                 decoder refuses the whole batch)",
                self.seed
            );
        }
        self.with_core(n, |c, e| c.event(e, ev));
    }

    fn join(&mut self, n: u32, kind: Kind) {
        if self.peers.get(&n).is_some_and(|p| p.crashed) {
            // a node that failed here before: it rebooted and joined the cluster again
            // since, which the quorum service reports with its time
            self.clock_ms += 1000;
            self.fence.cluster_add.insert(n, self.clock_ms / 1000);
        }
        // a daemon that left joins again as the same process; one that failed is another
        let pid = match self.peers.get(&n) {
            Some(p) if p.left && !p.crashed => Some(p.daemon),
            _ => None,
        };
        let pid = pid.unwrap_or_else(|| {
            self.next_pid += 1;
            self.next_pid
        });
        self.joins += 1;
        let name = LockspaceName::new(NAME).expect("name");
        let seed = u64::from(n) << 17 | u64::from(self.joins) << 40;
        let mut core = LsCore::new(name, n, true, seed);
        core.set_native(kind != Kind::Plain);
        if kind == Kind::Older {
            core.withhold_start_flags(HeaderFlags::NATIVE2 | HeaderFlags::NATIVE_SYNC);
        }
        core.set_native_limits(self.limits);
        core.set_deadlock_detect(self.deadlock);
        let mut peer = Peer {
            id: n,
            kind,
            core,
            pid: Some(pid),
            daemon: pid,
            side: 0,
            inbox: VecDeque::new(),
            outbox: VecDeque::new(),
            procs: Procs::default(),
            fresh: 0,
            left: false,
            crashed: false,
        };
        let ring = self.ring_id(0);
        peer.inbox.push_back(Event::Totem {
            ring,
            members: self.nodes_on(0, Some(n)),
        });
        let joined = peer.member().expect("member");
        self.peers.insert(n, peer);
        self.announce(0, &[], &[joined]);
    }

    fn leave(&mut self, n: u32) {
        let p = self.peers.get_mut(&n).expect("peer");
        p.core.leave();
        let Some(pid) = p.pid.take() else {
            return;
        };
        p.outbox.clear();
        let gone = Member {
            nodeid: n,
            pid,
            reason: Reason::Leave,
        };
        p.inbox.push_back(Event::ConfChg {
            members: Vec::new(),
            left: vec![gone],
            joined: Vec::new(),
        });
        let side = p.side;
        self.announce(side, &[gone], &[]);
    }

    fn crash(&mut self, n: u32) {
        let Some(p) = self.peers.get_mut(&n) else {
            return;
        };
        let Some(pid) = p.pid.take() else {
            return;
        };
        p.inbox.clear();
        p.outbox.clear();
        p.crashed = true;
        let side = p.side;
        p.side = 0;
        let gone = Member {
            nodeid: n,
            pid,
            reason: Reason::NodeDown,
        };
        self.announce(side, &[gone], &[]);
        self.totem(side);
        // down until its fencing completes (with fencing off, at once)
        if self.fencing {
            self.unfenced.insert(n);
            self.fence.in_progress = true;
        }
    }

    fn split(&mut self, n: u32) {
        let Some(pid) = self.peers.get(&n).and_then(|p| p.pid) else {
            return;
        };
        let others: Vec<Member> = self
            .members(0)
            .into_iter()
            .filter(|m| m.nodeid != n)
            .map(|m| Member {
                reason: Reason::NodeDown,
                ..m
            })
            .collect();
        let lone = Member {
            nodeid: n,
            pid,
            reason: Reason::NodeDown,
        };
        self.peers.get_mut(&n).expect("peer").side = 1;
        self.announce(0, &[lone], &[]);
        if !others.is_empty() {
            self.announce(1, &others, &[]);
        }
        self.totem(0);
        self.totem(1);
    }

    fn heal(&mut self) {
        let lone: Vec<u32> = self
            .peers
            .values()
            .filter(|p| p.side == 1 && p.pid.is_some())
            .map(|p| p.id)
            .collect();
        for n in lone {
            self.crash(n);
        }
    }

    fn ring_id(&mut self, side: u32) -> RingId {
        let nodes = self.nodes_on(side, None);
        RingId {
            nodeid: nodes.first().copied().unwrap_or(0),
            seq: self.ring,
        }
    }

    fn nodes_on(&self, side: u32, with: Option<u32>) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .peers
            .values()
            .filter(|p| p.pid.is_some() && p.side == side)
            .map(|p| p.id)
            .collect();
        if let Some(n) = with.filter(|n| !v.contains(n)) {
            v.push(n);
            v.sort_unstable();
        }
        v
    }

    fn totem(&mut self, side: u32) {
        self.ring += 1;
        let ring = self.ring_id(side);
        let members = self.nodes_on(side, None);
        for p in self
            .peers
            .values_mut()
            .filter(|p| p.pid.is_some() && p.side == side)
        {
            p.inbox.push_back(Event::Totem {
                ring,
                members: members.clone(),
            });
        }
    }

    /// A confchg to every member on `side`.
    fn announce(&mut self, side: u32, left: &[Member], joined: &[Member]) {
        let members = self.members(side);
        for p in self
            .peers
            .values_mut()
            .filter(|p| p.pid.is_some() && p.side == side)
        {
            p.inbox.push_back(Event::ConfChg {
                members: members.clone(),
                left: left.to_vec(),
                joined: joined.to_vec(),
            });
        }
    }

    /// No range is granted twice among the processes of live nodes on a quorate side (a
    /// node cut off answers nothing once it knows; what it held before is void once the
    /// majority removed it, as it is then fenced or killed).
    pub(crate) fn check_grants(&self) {
        let live = self
            .peers
            .values()
            .filter(|p| p.pid.is_some() && self.quorate(p.side))
            .map(|p| (p.id, &p.procs));
        if let Err(e) = grants_clash(live) {
            panic!("seed {}: {e}", self.seed);
        }
    }

    /// Nothing in flight: no message unordered or unhandled, no batch or STATE unsent, no
    /// transfer, no fencing pending, no partition, every member started with its table.
    pub(crate) fn quiet(&self) -> bool {
        self.unfenced.is_empty()
            && self.peers.values().all(|p| {
                p.inbox.is_empty()
                    && (p.pid.is_none()
                        || (p.outbox.is_empty()
                            && p.side == 0
                            && !p.core.batch_urgent()
                            && !p.core.sending()
                            && p.started()))
            })
    }

    /// What keeps the world from being quiet, one line a node (empty when quiet).
    pub(crate) fn unquiet(&self) -> String {
        let mut out = String::new();
        if !self.unfenced.is_empty() {
            out += &format!("unfenced {:?}\n", self.unfenced);
        }
        for p in self.peers.values() {
            let r = p.core.report();
            out += &format!(
                "node {} pid {:?} side {} inbox {} outbox {} urgent {} sending {} flags {:?} \
                 members {:?} next {:?} wait {:?}\n",
                p.id,
                p.pid,
                p.side,
                p.inbox.len(),
                p.outbox.len(),
                p.core.batch_urgent(),
                p.core.sending(),
                r.info.flags,
                r.members,
                r.next_members,
                r.info.cg_next.wait_condition,
            );
            if std::env::var_os("DLM_SIM_TRACE").is_some() {
                out += &format!("  next {:?}\n  prev {:?}\n", r.info.cg_next, r.info.cg_prev);
            }
        }
        out
    }

    /// Checks for a quiet moment: replicas agree (on owners and recalls; on every resource
    /// nobody owns; on owned ones, every copy but the owner's, and the owner's too when no
    /// STATE is unsent), every process's bytes are in its node's table and nothing else of
    /// its node is, every non-blocking request was answered, every unanswered blocking one
    /// is a waiter, and nothing waits in a recall.
    pub(crate) fn check_quiet(&mut self) {
        let seed = self.seed;
        for p in self.peers.values_mut().filter(|p| p.pid.is_some()) {
            p.procs.drain_closes(p.id, true);
        }
        let live: Vec<&Peer> = self.peers.values().filter(|p| p.pid.is_some()).collect();
        let Some(first) = live.first() else {
            return;
        };
        let mut numbers = BTreeSet::new();
        for p in &live {
            numbers.extend(p.core.plocks().resource_numbers());
            assert_eq!(
                p.core.recalls_waiting(),
                0,
                "seed {seed}: node {}: requests wait in a recall when quiet",
                p.id
            );
        }
        let synced = live.iter().all(|p| !p.core.batch_pending());
        for &number in &numbers {
            let owner = first.core.owner_of(number);
            let lines = |p: &Peer| -> Vec<String> {
                p.core
                    .plocks()
                    .dump_of(number, 0)
                    .map(|e| e.to_string())
                    .collect()
            };
            let copies: Vec<(u32, Vec<String>)> = live
                .iter()
                .filter(|p| synced || Some(p.id) != owner)
                .map(|p| (p.id, lines(p)))
                .collect();
            for p in &live {
                assert_eq!(
                    p.core.owner_of(number),
                    owner,
                    "seed {seed}: nodes {} and {} disagree on who owns {number}",
                    p.id,
                    first.id
                );
            }
            if let Some((a, la)) = copies.first() {
                for (b, lb) in &copies[1..] {
                    assert_eq!(
                        la, lb,
                        "seed {seed}: nodes {a} and {b} hold {number} differently (owner {owner:?})"
                    );
                }
            }
        }
        if live.iter().all(|p| !p.core.is_native()) {
            for p in &live {
                assert_eq!(
                    p.core.plocks().resource_numbers(),
                    first.core.plocks().resource_numbers(),
                    "seed {seed}: nodes {} and {}: resources in different orders",
                    p.id,
                    first.id
                );
            }
        }
        for p in &live {
            check_own(p, seed);
        }
    }

    /// A failed node's fencing may complete: every survivor has seen the failure.
    pub(crate) fn can_fence(&self) -> bool {
        self.peers
            .values()
            .all(|p| !p.inbox.iter().any(|e| matches!(e, Event::ConfChg { .. })))
    }

    /// Every fencing completes, and the cluster runs until nothing moves (STATEs sent,
    /// waits retried by the nodes' polls): how a run ends before its last checks.
    pub(crate) fn settle(&mut self) {
        self.settle_with(true);
    }

    /// [`Self::settle`], sending the STATEs of local decisions only if `states` (a
    /// simulation without a sync timer pauses without them).
    pub(crate) fn settle_with(&mut self, states: bool) {
        loop {
            // every step taken, in a fixed order; STATEs once nothing else moves
            let (syncs, steps): (Vec<Step>, Vec<Step>) = self
                .enabled(false)
                .into_iter()
                .partition(|s| matches!(s, Step::Sync(_)));
            if !steps.is_empty() {
                for s in steps {
                    self.step(&s);
                }
                continue;
            }
            if let Some(&n) = self.unfenced.iter().next().filter(|_| self.can_fence()) {
                self.step(&Step::Fence(n));
                continue;
            }
            if states && !syncs.is_empty() {
                for s in syncs {
                    self.step(&s);
                }
                continue;
            }
            let before = self.fingerprint();
            for s in self.enabled(true) {
                self.step(&s);
            }
            if self.fingerprint() == before {
                return;
            }
        }
    }

    /// Hashes the whole world (every node's core and queues, its processes' model, the
    /// clock and the fencing), for a search to prune what it has seen.
    pub(crate) fn fingerprint(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for p in self.peers.values() {
            (p.id, p.kind, p.pid, p.side, p.fresh, p.left, p.crashed).hash(&mut h);
            p.core.fingerprint(&mut h);
            for e in &p.inbox {
                match e {
                    Event::Deliver {
                        nodeid,
                        pid,
                        payload,
                    } => (nodeid, pid, payload).hash(&mut h),
                    e => format!("{e:?}").hash(&mut h),
                }
            }
            p.outbox.hash(&mut h);
            p.procs.hash(&mut h);
        }
        (self.clock_ms, &self.unfenced, self.ring, self.serial).hash(&mut h);
        h.finish()
    }
}

/// Node `p`'s processes hold in its table exactly the bytes their replies say (nothing
/// lost, nothing phantom); its non-blocking requests were all answered; its unanswered
/// blocking ones are waiters there.
fn check_own(p: &Peer, seed: u64) {
    let table = p.core.plocks();
    let id = i32::try_from(p.id).unwrap_or(0);
    let mut covered: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let mut waiting = BTreeSet::new();
    for e in table.dump(0).filter(|e| e.nodeid == id) {
        if e.waiting {
            waiting.insert(e.pid);
        } else {
            *covered.entry((e.owner, e.number)).or_insert(0) |= mask(e.start, e.end);
        }
    }
    for (key, bits) in &p.procs.held {
        let have = covered.get(key).copied().unwrap_or(0);
        assert_eq!(
            have,
            *bits,
            "seed {seed}: node {} owner {} file {}: table {have:#b}, replies {bits:#b}\n{}\n{}",
            p.id,
            key.0,
            key.1,
            p.procs.history(key.0, key.1),
            table.dump_text()
        );
    }
    for (key, bits) in &covered {
        let replied = p.procs.held.get(key).copied().unwrap_or(0);
        assert_eq!(
            *bits, replied,
            "seed {seed}: node {}: phantom lock of owner {} on file {}",
            p.id, key.0, key.1
        );
    }
    if let Some(q) = p.procs.unanswered().next() {
        panic!("seed {seed}: node {} never answered {:?}", p.id, q.info);
    }
    for w in p.procs.waiting() {
        assert!(
            waiting.contains(&w.info.pid),
            "seed {seed}: node {}: {:?} is neither answered nor waiting\n{}",
            p.id,
            w.info,
            table.dump_text()
        );
    }
}
