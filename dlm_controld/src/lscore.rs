//! One lockspace's logic, sans I/O: the membership machine, the replicated plock table, the
//! state transfer and the hold of plock work while the lockspace is stopped.
//!
//! The daemon's lockspace task feeds it group events, kernel requests and timer polls and
//! performs the [`Action`]s it returns; the multi-node simulation in `tests/` drives the very
//! same code on the simulated bus. Nothing here touches a file descriptor or a clock.

use dlm_cpg::Event;
use dlm_plock::Lockspace as PlockTable;
use dlm_proto::LockspaceName;
use dlm_proto::kernel::PlockInfo;
use dlm_proto::query::{DlmcChange, DlmcLockspace, LockspaceFlags, WaitCondition};
use dlm_proto::wire::{
    Body, Change as StartBody, DAEMON_PROTOCOL, DlmHeader, HeaderFlags, Message, MsgType,
    NativeEntry, NativeKind, NativeWriter, PlocksDataWriter, encode_plock_msg, global_id,
};

use crate::log::{PLOCK_DEBUG_TARGET, PLOCK_TARGET};
use crate::membership::{self, ChangeInfo, Env, FenceView, Membership, NodeHistory};
use crate::native::{Fresh, Limits, Local, Owners, ReplyOrder, Rules, Waiting};

/// What the lockspace's shell must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write `control` = 0.
    StopKernel,
    /// `start_kernel`: `id` (when joining), `nodir`, configfs members, `control` = 1,
    /// `event_done` = 0 (when joining).
    StartKernel {
        /// Write the global id first.
        write_id: bool,
        /// Members in CPG order.
        members: Vec<u32>,
        /// Members whose configfs directory must be recreated.
        renew: Vec<u32>,
        /// The join completes.
        event_done: bool,
    },
    /// Multicast these bytes on the lockspace's group.
    Send(Vec<u8>),
    /// Write this reply to the plock device.
    Reply(PlockInfo),
    /// Ask corosync to kill the node (its daemon died while its corosync lives).
    KickNode(u32),
    /// Our leave is complete: remove configfs members, `event_done` = 0, end the task.
    Left,
    /// The plock dumps that waited ([`LsCore::want_fresh`]) may be made: every owner's
    /// decisions are in our table (or the wait was given up).
    Fresh,
    /// We sent our plock state to joining nodes: this many PLOCKS_DATA messages.
    TransferSent {
        /// PLOCKS_DATA messages.
        messages: u32,
    },
    /// We received the plock state as a joiner.
    TransferReceived {
        /// PLOCKS_DATA messages restored.
        messages: u32,
        /// From the start of saving to PLOCKS_DONE, milliseconds.
        ms: u64,
    },
    /// A delivered message was dropped: log it once and count it.
    Dropped {
        /// Sender.
        from: u32,
        /// Why.
        why: String,
    },
}

/// The world around the lockspace at one moment.
#[derive(Debug, Clone, Copy)]
pub struct LsEnv<'a> {
    /// Monotonic seconds (membership times).
    pub now: u64,
    /// Monotonic milliseconds (plock ages).
    pub now_ms: u64,
    /// The cluster is quorate.
    pub quorate: bool,
    /// The quorum service's ring sequence.
    pub cluster_ring_seq: u64,
    /// `enable_quorum_lockspace`.
    pub quorum_required: bool,
    /// `enable_fencing` (fencing facts from `fencing`).
    pub fencing_enabled: bool,
    /// Fencing facts.
    pub fencing: &'a dyn FenceView,
}

impl<'a> LsEnv<'a> {
    /// A quorate world at `now_ms` with fencing off and `fencing` for its facts (what the
    /// tests of single inputs meet).
    pub fn quorate_unfenced(now_ms: u64, fencing: &'a dyn FenceView) -> Self {
        Self {
            now: now_ms / 1000,
            now_ms,
            quorate: true,
            cluster_ring_seq: 1,
            quorum_required: true,
            fencing_enabled: false,
            fencing,
        }
    }
}

/// A lockspace as the query sockets report it.
#[derive(Debug, Clone)]
pub struct LsReport {
    /// The `dlmc_lockspace` record.
    pub info: DlmcLockspace,
    /// Members of the started change.
    pub members: Vec<u32>,
    /// Members of the newest pending change.
    pub next_members: Vec<u32>,
    /// Node history for node queries.
    pub history: Vec<(u32, NodeHistory)>,
    /// Granted plocks.
    pub locks: usize,
    /// Granted plocks of this node's processes (what `plock_locks_max` bounds).
    pub our_locks: usize,
    /// `plock_locks_max` as this lockspace applies it (0: no bound).
    pub locks_max: usize,
    /// Blocked plock requests.
    pub waiters: usize,
    /// Inodes with plocks or waiters.
    pub resources: usize,
    /// When the longest-waiting waiter started waiting (monotonic ms).
    pub oldest_waiter_since_ms: Option<u64>,
    /// Messages queued for the group, not yet taken by corosync (filled by the shell).
    pub send_queue: usize,
    /// Lock owners in a cycle of waiting owners (a deadlock across nodes), among the first
    /// [`WAITS_MAX`] lines of the resources with waiters, as last counted
    /// ([`LsCore::count_cycles`]).
    pub owners_in_cycle: usize,
}

/// Dump lines a report's deadlock count looks at, at most.
pub const WAITS_MAX: usize = 100_000;

/// A state transfer going out (see [`LsCore::pump`]).
#[derive(Debug, Clone)]
struct Sending {
    cursor: dlm_plock::SnapshotCursor,
    seq: u32,
    body: StartBody,
    sent: u32,
}

/// Something applied to the table in delivery order: held while the lockspace is stopped
/// or our table goes out, saved while a joiner waits for the table. It is applied by the
/// [`Rules`] of its place in the total order, whenever that is.
#[derive(Debug, Clone)]
enum Item {
    /// A request (a PLOCK message, or a NATIVE `REQUEST` entry).
    Request {
        from: u32,
        info: PlockInfo,
        claim: bool,
    },
    /// A NATIVE `STATE` with its `HELD` entries: the owner's resource as it is now.
    State {
        from: u32,
        number: u64,
        state: Vec<dlm_plock::Held>,
    },
    /// A NATIVE `RELEASE` entry.
    Release { from: u32, number: u64 },
    /// A node left: its plocks go.
    Purge(u32),
    /// A node's START: what it owned goes back.
    Disown(u32),
    /// A NATIVE `SYNC`: node `from` asks the owners for their STATEs (request `id`).
    Sync { from: u32, id: u64 },
    /// A NATIVE `SYNCED`: owner `from` answered request `id` of node `to`.
    Synced { from: u32, id: u64, to: u32 },
}

/// Native mode's counts, for the shell's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NativeStats {
    /// Requests decided here without CPG.
    pub local: u64,
    /// Requests of another node that found one of our resources and made us give it back.
    pub recalls: u64,
    /// NATIVE messages sent.
    pub batches: u64,
}

/// One lockspace on one node.
#[derive(Debug, Clone)]
pub struct LsCore {
    name: LockspaceName,
    /// The name as text, shared by the plock log's records.
    text: std::sync::Arc<str>,
    gid: u32,
    our: u32,
    embedded: bool,
    /// Keys the plock table's index shapes.
    seed: u64,
    mem: Membership,
    ring: u64,
    plocks: PlockTable,
    /// We joined and have no plock state yet.
    need_plocks: bool,
    /// Plock messages are saved until the transfer ends (`save_plocks`).
    save_plocks: bool,
    /// We said once that a CANCEL was refused for a C member's sake.
    cancel_warned: bool,
    saved: Vec<(Item, Rules)>,
    /// While receiving the state: when saving began (ms) and PLOCKS_DATA restored.
    transfer: Option<(u64, u32)>,
    /// The node whose PLOCKS_DATA / PLOCKS_DONE we take (the started change's data node).
    data_from: u32,
    /// Our own kernel requests read while we wait for the table: multicast once we have it.
    unsent: Vec<PlockInfo>,
    /// Our table going out to a joiner.
    sending: Option<Sending>,
    held: Vec<(Item, Rules)>,
    left: bool,
    /// Native mode: who owns what (replicated).
    owners: Owners,
    /// Our non-blocking requests in the order the kernel handed them to us.
    order: ReplyOrder,
    /// Our records for local decisions.
    local: Local,
    /// The NATIVE message being filled.
    writer: NativeWriter,
    /// A plock dump waiting for every owner's STATEs.
    fresh: Fresh,
    /// The started change is native and no change is pending: we decide and send natively.
    native_sending: bool,
    /// A native change started since the table's resources were last put in number order:
    /// local decisions and STATEs created resources in each node's own order.
    order_may_differ: bool,
    /// We are the started change's only member (decided entries stay here).
    alone: bool,
    stats: NativeStats,
    /// A resource's state, reused.
    scratch: Vec<dlm_plock::Held>,
    /// The engine's replies to one request, reused.
    replies: Vec<dlm_plock::Reply>,
    /// Owners in a cycle of waiting owners when last counted.
    owners_in_cycle: usize,
    /// Moves whenever what [`Self::report`] shows of membership may have changed.
    generation: u64,
    /// A local decision is being applied (its reply is the last one expected).
    deciding: bool,
    /// `plock_locks_max`: the most granted locks our processes may hold here (0: no bound).
    locks_max: usize,
    /// Native mode's bounds.
    limits: Limits,
    /// The latest time we were given (ms): ages of the STATEs we send.
    now_ms: u64,
    /// Says that requests were refused at `locks_max`, once a second.
    over_max_log: crate::rate::LogEvery,
}

impl LsCore {
    /// A lockspace being joined by node `our`. With `embedded` the group's own ring stands
    /// in for the quorum service's. `seed` keys the plock table's index shapes (see
    /// [`PlockTable::new`]): the daemon draws it at random per process.
    pub fn new(name: LockspaceName, our: u32, embedded: bool, seed: u64) -> Self {
        let gid = global_id(&name);
        Self {
            text: std::sync::Arc::from(name.to_str_lossy().as_ref()),
            name,
            gid,
            our,
            embedded,
            seed,
            mem: Membership::joining_as(our, nonce_of(seed)),
            ring: 0,
            plocks: PlockTable::new(our, gid, seed),
            need_plocks: true,
            save_plocks: false,
            cancel_warned: false,
            saved: Vec::new(),
            transfer: None,
            data_from: 0,
            unsent: Vec::new(),
            sending: None,
            held: Vec::new(),
            left: false,
            owners: Owners::default(),
            order: ReplyOrder::default(),
            local: Local::new(seed ^ 3),
            writer: NativeWriter::new(DlmHeader {
                global_id: gid,
                ..DlmHeader::new(DAEMON_PROTOCOL, MsgType::NATIVE, our)
            }),
            fresh: Fresh::default(),
            native_sending: false,
            order_may_differ: false,
            alone: false,
            stats: NativeStats::default(),
            scratch: Vec::new(),
            replies: Vec::new(),
            owners_in_cycle: 0,
            generation: 0,
            deciding: false,
            locks_max: 0,
            limits: Limits::default(),
            now_ms: 0,
            over_max_log: crate::rate::LogEvery::default(),
        }
    }

    /// Moves whenever membership, the join's transfer or a wait may have changed what
    /// [`Self::report`] says of them (not at plock requests and deliveries): the shell
    /// publishes a new report for the query socket then.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether our STARTs offer native mode (`plock_native`; on unless turned off).
    pub fn set_native(&mut self, on: bool) {
        self.mem.set_native(on);
    }

    /// Counts the owners in a cycle of waiting owners for [`Self::report`]: a walk of up
    /// to [`WAITS_MAX`] lines, so the shell calls it on its once-a-second poll, never per
    /// query or scrape (which anyone on the node may send).
    pub fn count_cycles(&mut self) {
        self.owners_in_cycle = if self.plocks.waiter_count() == 0 {
            0
        } else {
            self.plocks.waits(0, WAITS_MAX).in_cycle.len()
        };
    }

    /// Whether our STARTs say the C members of a lockspace apply CANCEL
    /// (`c_peers_apply_cancel`; off unless turned on): see `Membership::started_applies_cancel`.
    pub fn set_c_peers_cancel(&mut self, on: bool) {
        self.mem.set_c_peers_cancel(on);
    }

    /// Our STARTs leave out these `HeaderFlags` bits, as a daemon of ours that predates
    /// them does (the simulations mix versions of ours this way).
    pub fn withhold_start_flags(&mut self, flags: u32) {
        self.mem.withhold_start_flags(flags);
    }

    /// Whether our STARTs offer deadlock detection (`plock_deadlock_detect`; off unless
    /// turned on). A lockspace detects deadlocks while every started member offers it.
    pub fn set_deadlock_detect(&mut self, on: bool) {
        self.mem.set_deadlock(on);
    }

    /// `plock_locks_max`: once our processes hold `max` granted locks here, a request that
    /// would add one is refused -ENOLCK on this node (0: no bound).
    pub fn set_locks_max(&mut self, max: usize) {
        self.locks_max = max;
    }

    /// Native mode's bounds (the defaults unless a test makes them small).
    pub fn set_native_limits(&mut self, limits: Limits) {
        self.limits = limits;
        self.writer.set_max(limits.batch_max);
    }

    /// Native mode's counts so far.
    pub fn native_stats(&self) -> NativeStats {
        self.stats
    }

    /// The started change is native (every member offered it) and no change is pending.
    pub fn is_native(&self) -> bool {
        self.native_sending
    }

    /// Resources we own now.
    pub fn owned(&self) -> usize {
        self.owners.count(self.our)
    }

    /// Requests of any node waiting for an owner to give a resource back.
    pub fn recalls_waiting(&self) -> usize {
        self.owners.waiting()
    }

    /// Hashes everything that decides what this core does next into `h` — not its
    /// counters, nor the plock table's arena layout, nor its hash maps' order: the
    /// exhaustive check of small clusters prunes the states it has seen by it.
    pub fn fingerprint(&self, h: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        format!("{:?}", self.mem).hash(h);
        let flags = (
            self.need_plocks,
            self.save_plocks,
            self.cancel_warned,
            self.left,
        );
        (
            flags,
            self.native_sending,
            self.order_may_differ,
            self.alone,
        )
            .hash(h);
        (self.data_from, self.transfer, self.locks_max).hash(h);
        format!("{:?}{:?}{:?}", self.saved, self.held, self.unsent).hash(h);
        let sending = self.sending.as_ref();
        sending
            .map(|s| (format!("{:?}", s.cursor), s.seq, s.sent))
            .hash(h);
        format!("{:?}{:?}{:?}", self.owners, self.order, self.fresh).hash(h);
        self.local.fingerprint(h);
        self.writer.pending().hash(h);
        self.plocks.fingerprint(h);
    }

    /// The node that decides resource `number` locally (native mode), if any.
    pub fn owner_of(&self, number: u64) -> Option<u32> {
        self.owners.owner(number)
    }

    /// The lockspace name.
    pub fn name(&self) -> &LockspaceName {
        &self.name
    }

    /// The global id (`fsid` of its plock requests).
    pub fn global_id(&self) -> u32 {
        self.gid
    }

    /// Our leave completed.
    pub fn is_left(&self) -> bool {
        self.left
    }

    /// The kernel lockspace is stopped.
    pub fn kernel_stopped(&self) -> bool {
        self.mem.kernel_stopped()
    }

    /// The replicated plock table (dumps, digests).
    pub fn plocks(&self) -> &PlockTable {
        &self.plocks
    }

    /// The resources of a plock dump, in its order: the table's (C's creation order, the
    /// same on every node) or, while native changes may have created them in each node's
    /// own order, number order — so that every node prints one table alike.
    pub fn dump_plan(&self) -> Vec<u64> {
        let mut numbers = self.plocks.resource_numbers();
        if self.order_may_differ {
            numbers.sort_unstable();
        }
        numbers
    }

    /// Still waiting for the plock state of a join.
    pub fn needs_plocks(&self) -> bool {
        self.need_plocks
    }

    fn env<'a>(&self, e: &LsEnv<'a>) -> Env<'a> {
        Env {
            now: e.now,
            cluster_ring_seq: if self.embedded {
                self.ring
            } else {
                e.cluster_ring_seq
            },
            quorate: e.quorate,
            quorum_required: e.quorum_required,
            fencing_enabled: e.fencing_enabled,
            fencing: e.fencing,
        }
    }

    fn header(&self, t: MsgType) -> DlmHeader {
        DlmHeader {
            global_id: self.gid,
            ..DlmHeader::new(DAEMON_PROTOCOL, t, self.our)
        }
    }

    /// A group event. What we have not sent yet goes first: a batch is never overtaken by
    /// anything the event makes us send (our START above all).
    pub fn event(&mut self, e: &LsEnv<'_>, ev: Event) -> Vec<Action> {
        let mut out = Vec::new();
        self.event_into(e, ev, &mut out);
        out
    }

    /// [`Self::event`] into `out` (the shell's kept vector: a delivery allocates none).
    pub fn event_into(&mut self, e: &LsEnv<'_>, ev: Event, out: &mut Vec<Action>) {
        self.tick(e.now_ms);
        self.flush_into(out);
        let fx = match ev {
            Event::Deliver {
                nodeid, payload, ..
            } => return self.deliver(e, nodeid, &payload, out),
            Event::Totem { ring, .. } => {
                self.generation += 1;
                self.ring = ring.seq;
                let env = self.env(e);
                self.mem.handle_totem(&env, ring.seq)
            }
            Event::ConfChg {
                members,
                left,
                joined,
            } => {
                self.generation += 1;
                let cc = crate::confchg::Confchg::of(&members, &left, &joined);
                crate::log::log_config(
                    &format!("dlm:ls:{}", self.name.to_str_lossy()),
                    &cc.members,
                    &cc.joined,
                    &cc.gone(),
                );
                let env = self.env(e);
                self.mem.handle_confchg(&env, &cc)
            }
        };
        out.extend(self.perform(e, fx));
    }

    /// `deliver_cb`: validated as C does (sender, negotiated major.minor); anything else is
    /// dropped.
    /// `_receive_plock`'s log line, on every node, in delivery order, before any check (as
    /// C): a PLOCK, or each request of a NATIVE batch (a decision of ours has its read line
    /// alone, as C's owner's; another owner's reach us as STATEs, not requests).
    fn log_receive(&self, now: u64, body: &Body<'_>) {
        let line = crate::log::PlockLine::Receive;
        match body {
            Body::Plock(info) => crate::log::plock_op(now, &self.text, line, info),
            Body::Native(batch) => {
                for en in batch.entries() {
                    if matches!(en.kind, NativeKind::Request { .. }) {
                        crate::log::plock_op(now, &self.text, line, &en.info);
                    }
                }
            }
            _ => {}
        }
    }

    fn deliver(&mut self, e: &LsEnv<'_>, from: u32, payload: &[u8], out: &mut Vec<Action>) {
        let (header, body) = match Message::decode(payload) {
            Ok(Message { header, body }) => (header, body),
            Err(e) => {
                return out.push(Action::Dropped {
                    from,
                    why: e.to_string(),
                });
            }
        };
        self.log_receive(e.now, &body);
        if let Err(why) = check_header(&header, from) {
            return out.push(Action::Dropped { from, why });
        }
        match body {
            Body::Start(c) => {
                self.generation += 1;
                // every decision of `from` came before its START: what it owned goes back
                self.gate(e, Item::Disown(from), out);
                let env = self.env(e);
                let fx = self
                    .mem
                    .handle_start(&env, from, header.flags.0, header.msgdata, &c);
                out.extend(self.perform(e, fx));
            }
            Body::Plock(info) if self.sender_is(from, &info, out) => {
                if self.save_plocks {
                    tracing::debug!(
                        target: PLOCK_TARGET,
                        "save plock from {from} len {}",
                        payload.len()
                    );
                } else if self.need_plocks {
                    tracing::debug!(target: PLOCK_TARGET, "msg plock nodeid {from} need_plock ignore");
                }
                let claim = false;
                self.gate(e, Item::Request { from, info, claim }, out);
            }
            Body::Native(batch) => self.deliver_native(e, from, &batch, out),
            // only while we wait for the state (need && save), and only from the data node
            Body::PlocksData(d)
                if self.need_plocks && self.save_plocks && from == self.data_from =>
            {
                self.receive_plocks_data(e, from, header.msgdata, &d, payload.len());
            }
            Body::PlocksDone(_) => {
                tracing::debug!(
                    target: PLOCK_DEBUG_TARGET,
                    "receive_plocks_done {from}:{} flags {:x} plocks_data {} need {} save {}",
                    header.msgdata,
                    header.flags.0,
                    header.msgdata2,
                    u8::from(self.need_plocks),
                    u8::from(self.save_plocks)
                );
                if self.need_plocks && self.save_plocks && from == self.data_from {
                    self.receive_plocks_done(e, from, &header, out);
                }
            }
            _ => {}
        }
    }

    /// `receive_plocks_data`: one resource of the state a joiner waits for.
    fn receive_plocks_data(
        &mut self,
        e: &LsEnv<'_>,
        from: u32,
        seq: u32,
        d: &dlm_proto::wire::PlocksData<'_>,
        len: usize,
    ) {
        // a refused chunk is dropped; the digest of the joiner shows it
        let _ = self.plocks.restore(e.now_ms, d.resource, d.entries());
        if let Some((_, n)) = self.transfer.as_mut() {
            *n += 1;
        }
        tracing::debug!(
            target: PLOCK_TARGET,
            "recv_plocks_data {from}:{seq} n {} o {} locks {} len {len}",
            d.resource.number,
            d.resource.owner,
            d.entries().count(),
        );
    }

    /// A NATIVE batch, entry by entry (a STATE with its HELD entries as one item).
    fn deliver_native(
        &mut self,
        e: &LsEnv<'_>,
        from: u32,
        batch: &dlm_proto::wire::NativeBatch<'_>,
        out: &mut Vec<Action>,
    ) {
        let mut state: Option<(u64, u16, Vec<dlm_plock::Held>)> = None;
        for entry in batch.entries() {
            if !self.sender_is(from, &entry.info, out) {
                return;
            }
            let info = entry.info;
            let item = match entry.kind {
                NativeKind::Request { claim } => Item::Request { from, info, claim },
                NativeKind::Release => Item::Release {
                    from,
                    number: info.number,
                },
                NativeKind::State { held } => {
                    state = Some((info.number, held, Vec::with_capacity(usize::from(held))));
                    self.state_done(e, from, &mut state, out);
                    continue;
                }
                NativeKind::Sync => Item::Sync {
                    from,
                    id: info.number,
                },
                NativeKind::Synced => Item::Synced {
                    from,
                    id: info.number,
                    to: u32::try_from(info.owner).unwrap_or(0),
                },
                NativeKind::Held { candidate } => {
                    // the decoder checked that HELD entries follow their STATE
                    if let Some((_, _, v)) = state.as_mut() {
                        v.push(held_of(&info, candidate));
                    }
                    self.state_done(e, from, &mut state, out);
                    continue;
                }
            };
            self.gate(e, item, out);
        }
    }

    /// A STATE whose HELD entries have all come goes to the gate.
    fn state_done(
        &mut self,
        e: &LsEnv<'_>,
        from: u32,
        state: &mut Option<(u64, u16, Vec<dlm_plock::Held>)>,
        out: &mut Vec<Action>,
    ) {
        if state
            .as_ref()
            .is_some_and(|(_, n, v)| v.len() == usize::from(*n))
        {
            if let Some((number, _, state)) = state.take() {
                self.gate(
                    e,
                    Item::State {
                        from,
                        number,
                        state,
                    },
                    out,
                );
            }
        }
    }

    /// A plock request from the kernel: multicast; applied when delivered. While we still
    /// wait for the table it is kept here and multicast once the table is complete (unlike
    /// C, which answers it from a partial table): our own messages are then never among the
    /// saved ones a restarted transfer discards, and their replies come from the whole table.
    /// In native mode a request for a resource we own is decided here (see
    /// docs/native-mode.md); a non-blocking request's reply still leaves in read order.
    /// Its actions are added to `out` (the shell reuses one vector: no allocation per
    /// request).
    pub fn request(&mut self, now_ms: u64, info: &PlockInfo, out: &mut Vec<Action>) {
        self.tick(now_ms);
        self.order.expect(info);
        if self.need_plocks {
            self.unsent.push(*info);
        } else if self.over_locks_max(info) {
            self.refuse_over_max(now_ms, info, out);
        } else if self.can_decide(info.number) && self.fits(info.number) {
            self.decide(now_ms, info, out);
        } else {
            if self.can_decide(info.number) {
                // its STATE might not fit one message: the resource goes back first
                self.give_back_ours(info.number, out);
            }
            self.send_request(now_ms, info, out);
        }
    }

    /// Time moves on (never back).
    fn tick(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
    }

    /// One more local decision on `number` leaves it small enough for one STATE: a request
    /// adds at most two entries (a lock cut in two around a new one), and each waiter its
    /// pass grants at most one more (it becomes a lock, which may cut one of its owner's in
    /// two). Alone, no STATE is sent.
    fn fits(&self, number: u64) -> bool {
        let (held, _) = self.plocks.holders(number);
        self.alone || held + 2 + self.plocks.waiter_count_of(number) <= self.limits.state_max
    }

    /// Our processes hold `locks_max` granted locks here and `info` would add one: a LOCK,
    /// or an UNLOCK that cuts a fragment in two. (Requests of ours still in CPG are not
    /// counted: the table may pass the bound by the few the backlog lets through.)
    fn over_locks_max(&self, info: &PlockInfo) -> bool {
        use dlm_proto::kernel::PlockOp;
        self.locks_max != 0
            && self.plocks.our_lock_count() >= self.locks_max
            && match info.op {
                PlockOp::LOCK => true,
                PlockOp::UNLOCK => !info.flags.close() && self.plocks.unlock_splits(info),
                _ => false,
            }
    }

    /// Answers `info` -ENOLCK here, in its place among the replies, and says so at most
    /// once a second with the count since the last line.
    fn refuse_over_max(&mut self, now_ms: u64, info: &PlockInfo, out: &mut Vec<Action>) {
        self.answer_here(info, -dlm_proto::errno::ENOLCK, out);
        if let Some(held) = self.over_max_log.allow(now_ms) {
            tracing::warn!(
                "{} plock request refused -ENOLCK: this node's processes hold {} locks here \
                 (plock_locks_max {}) ({held} more not logged)",
                self.name,
                self.plocks.our_lock_count(),
                self.locks_max,
            );
        }
    }

    /// Answers `info` with `rv` here, without CPG, in its place among the fsid's replies.
    fn answer_here(&mut self, info: &PlockInfo, rv: i32, out: &mut Vec<Action>) {
        self.deciding = true;
        self.reply(PlockInfo { rv, ..*info }, out);
        self.deciding = false;
    }

    /// We may decide a request for `number` here: native, started, nobody waiting for it,
    /// none of our requests for it still in CPG (replicas apply in send order), and ours —
    /// or no other node's while we are the started change's only member (the total order of
    /// one member is the order we read requests in; a joiner takes the whole table at its
    /// start), so a node left alone needs no claim per file.
    fn can_decide(&self, number: u64) -> bool {
        let owner = self.owners.owner(number);
        let ours = if self.alone {
            owner.is_none_or(|o| o == self.our)
        } else {
            owner == Some(self.our)
        };
        ours && self.native_sending
            && !self.mem.kernel_stopped()
            && self.sending.is_none()
            && !self.owners.recalling(number)
            && !self.local.in_cpg(number)
            && !self.local.releasing.contains(&number)
    }

    fn decide(&mut self, now_ms: u64, info: &PlockInfo, out: &mut Vec<Action>) {
        self.stats.local += 1;
        self.deciding = true;
        let rules = self.rules(self.our);
        self.engine_apply(now_ms, self.our, info, rules, out);
        self.deciding = false;
        // a GET changes nothing; alone, nobody else keeps a table
        if info.op == dlm_proto::kernel::PlockOp::GET || self.alone {
            return;
        }
        self.local.dirty.insert(info.number);
        self.check_size(now_ms, info.number, out);
    }

    /// Our owned resource `number` changed: one grown past `release_at` goes back to the
    /// shared table (requests of ours that crossed CPG grow it too); one that holds nothing
    /// starts its idle time.
    fn check_size(&mut self, now_ms: u64, number: u64, out: &mut Vec<Action>) {
        let held = self.plocks.holders(number).0;
        self.local.holding(number, held, now_ms);
        if held > self.limits.release_at {
            self.give_back_ours(number, out);
        }
    }

    /// A change started (its STARTs all delivered; membership emits `StartKernel` before
    /// every `Started`, the kernel being stopped at every confchg): whether it is native,
    /// and so whether a claim is granted and an owner can send RELEASE, counts from here,
    /// before the requests held while stopped are applied. (Decided later, at `Started`,
    /// a held request could begin a recall whose RELEASE was never sent, its waiters
    /// never answered — or, beside a C joiner, grant a claim no RELEASE could end.)
    fn change_started(&mut self) {
        self.native_sending = self.mem.started_members_have(HeaderFlags::NATIVE2);
        self.alone = self.mem.started_members().len() == 1;
    }

    /// Leaving native mode, every member puts its resources in number order at one point
    /// of the total order: after the requests and STATEs held while stopped (a STATE
    /// re-creates its resource at the list's tail on all but its owner), before a
    /// joiner's table goes. From here on C's creation order is one order again.
    fn order_resources(&mut self) {
        if self.order_may_differ && !self.native_sending {
            self.plocks.order_by_number();
        }
        self.order_may_differ = self.native_sending;
    }

    /// We give back a resource we own: its STATE (if our decisions changed it since the
    /// last), then RELEASE; we decide it no more.
    fn give_back_ours(&mut self, number: u64, out: &mut Vec<Action>) {
        if !self.native_sending || !self.local.releasing.insert(number) {
            return;
        }
        self.local.not_ours(number);
        self.send_state(number, out);
        let release = self.resource_info(number);
        self.push_entry(NativeKind::Release, &release, out);
    }

    /// STATE and HELD entries of resource `number` as our table has it, if our decisions
    /// changed it since its last STATE.
    fn send_state(&mut self, number: u64, out: &mut Vec<Action>) {
        if !self.local.dirty.remove(&number) {
            return;
        }
        let mut held = std::mem::take(&mut self.scratch);
        self.plocks.resource_state(self.now_ms, number, &mut held);
        // `fits` keeps every owned resource within one STATE
        debug_assert!(
            held.len() <= self.limits.state_max,
            "STATE of {}",
            held.len()
        );
        if held.len() > self.limits.state_max {
            tracing::error!(
                "{} plock resource {number:x}: a STATE of {} entries cannot be sent",
                self.name,
                held.len()
            );
        }
        if self.writer.len() + 1 + held.len() > self.writer.max() {
            self.flush_into(out);
        }
        let header = self.resource_info(number);
        let count = u16::try_from(held.len()).unwrap_or(u16::MAX);
        self.push_entry(NativeKind::State { held: count }, &header, out);
        for h in &held {
            let info = info_of(&header, h);
            let kind = NativeKind::Held {
                candidate: h.candidate,
            };
            self.push_entry(kind, &info, out);
        }
        self.scratch = held;
    }

    /// The info of a RELEASE or STATE entry of ours: the resource and us, nothing else.
    fn resource_info(&self, number: u64) -> PlockInfo {
        PlockInfo {
            version: dlm_proto::kernel::PLOCK_VERSION,
            op: dlm_proto::kernel::PlockOp::UNLOCK,
            ex: false,
            wait: false,
            flags: dlm_proto::kernel::PlockFlags(0),
            pid: 0,
            nodeid: i32::try_from(self.our).unwrap_or(i32::MAX),
            rv: 0,
            fsid: self.gid,
            number,
            start: 0,
            end: 0,
            owner: 0,
        }
    }

    /// Every resource our decisions changed goes out as a STATE, then the batch: what the
    /// shell sends every `plock_native_sync_ms` (so other nodes' tables and dumps show our
    /// decisions), and what goes before our START.
    pub fn sync(&mut self, now_ms: u64) -> Vec<Action> {
        self.tick(now_ms);
        let mut out = Vec::new();
        if self.native_sending {
            for number in std::mem::take(&mut self.local.dirty) {
                self.local.dirty.insert(number);
                self.send_state(number, &mut out);
            }
        }
        self.flush_into(&mut out);
        out
    }

    /// A request of ours to CPG: a NATIVE entry (claiming a resource nobody owns and no
    /// other node used lately) or, in a C-compatible lockspace, a PLOCK message.
    fn send_request(&mut self, now_ms: u64, info: &PlockInfo, out: &mut Vec<Action>) {
        if info.op == dlm_proto::kernel::PlockOp::CANCEL && !self.mem.started_applies_cancel() {
            // a C member might apply it (4.3) or not (4.2) while our kernel goes on waiting
            // on -EINVAL: multicast nothing and answer as C 4.2 does, the waiter staying
            // on every replica (the process keeps waiting, uninterruptibly, as with C 4.2)
            self.answer_here(info, -dlm_proto::errno::EINVAL, out);
            if !std::mem::replace(&mut self.cancel_warned, true) {
                tracing::warn!(
                    "{} plock CANCEL answered -EINVAL: a C member may not apply it (set \
                     c_peers_apply_cancel=1 on every node of ours if all C daemons are 4.3 or later)",
                    self.name
                );
            }
            return;
        }
        self.local.sent(info.number);
        if self.native_sending {
            // replicas have what we decided on it before they apply this
            self.send_state(info.number, out);
        }
        if !self.native_sending {
            out.push(Action::Send(
                encode_plock_msg(&self.header(MsgType::PLOCK), info).to_vec(),
            ));
            return;
        }
        // only a lock may claim: a GET or an UNLOCK of a file nobody uses holds nothing
        let claim = info.op == dlm_proto::kernel::PlockOp::LOCK
            && self.owners.owner(info.number).is_none()
            && !self.local.shared(info.number, now_ms)
            && self.owners.count(self.our) < self.limits.owned_max;
        self.push_entry(NativeKind::Request { claim }, info, out);
    }

    fn push_entry(&mut self, kind: NativeKind, info: &PlockInfo, out: &mut Vec<Action>) {
        if self.writer.is_full() {
            self.flush_into(out);
        }
        let _ = self.writer.push(&NativeEntry { kind, info: *info });
    }

    /// The NATIVE message being filled, if any, as a send: what the shell sends at the end
    /// of a loop turn that made it [`Self::batch_urgent`].
    pub fn flush(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        self.flush_into(&mut out);
        out
    }

    /// [`Self::flush`] into `out`.
    fn flush_into(&mut self, out: &mut Vec<Action>) {
        if let Some(bytes) = self.writer.finish() {
            self.stats.batches += 1;
            out.push(Action::Send(bytes));
        }
    }

    /// The batch holds entries (a request a process waits for, a RELEASE another node
    /// waits for, the STATEs that must reach the others before them): [`Self::flush`] at
    /// the end of this loop turn.
    pub fn batch_urgent(&self) -> bool {
        !self.writer.is_empty()
    }

    /// Our decisions changed resources the other members have not seen: [`Self::sync`] in
    /// a while.
    pub fn batch_pending(&self) -> bool {
        !self.local.dirty.is_empty()
    }

    /// The once-a-second retry, or a quorum change.
    pub fn poll(&mut self, e: &LsEnv<'_>) -> Vec<Action> {
        self.tick(e.now_ms);
        self.generation += 1;
        let mut out = Vec::new();
        if self.native_sending {
            // resources of ours that have held nothing for a while go back
            for number in self.local.idle_since(e.now_ms, self.limits.idle_ms) {
                self.give_back_ours(number, &mut out);
            }
        }
        self.flush_into(&mut out);
        if self.fresh.poll(e.now_ms) {
            out.push(Action::Fresh);
        }
        let env = self.env(e);
        let fx = self.mem.poll(&env);
        out.extend(self.perform(e, fx));
        out
    }

    /// The kernel released the lockspace: leave at the next confchg (the shell leaves the
    /// group).
    pub fn leave(&mut self) {
        self.generation += 1;
        self.mem.leave();
    }

    /// `receive_plock`'s check: a node asks only for itself (the engine would refuse it at
    /// apply time, silently).
    fn sender_is(&self, from: u32, info: &PlockInfo, out: &mut Vec<Action>) -> bool {
        if u32::try_from(info.nodeid).ok() == Some(from) {
            return true;
        }
        out.push(Action::Dropped {
            from,
            why: format!("plock request names node {}", info.nodeid),
        });
        false
    }

    /// `_receive_plock` gating: ignored before our snapshot point, saved during the
    /// transfer, held while stopped, applied otherwise.
    fn gate(&mut self, e: &LsEnv<'_>, item: Item, out: &mut Vec<Action>) {
        if self.need_plocks && !self.save_plocks {
            return;
        }
        let from = match &item {
            Item::Request { from, .. } => *from,
            _ => self.our,
        };
        let rules = self.rules(from);
        if self.save_plocks {
            self.saved.push((item, rules));
            return;
        }
        if self.mem.kernel_stopped() || self.sending.is_some() {
            self.held.push((item, rules));
            return;
        }
        self.apply_item(e.now_ms, item, rules, out);
    }

    /// The rules of this point of the total order for an item from `from`: a claim is
    /// granted only while a native change is started and no change is pending (a request
    /// delivered between a confchg and the change's start grants none, on every member
    /// alike, and a joiner has no owners), CANCEL and deadlock detection as the started
    /// change agreed. The kernel's stop and start are points of the total order (the
    /// confchg, the last START), so every member computes the same rules for an item.
    fn rules(&self, from: u32) -> Rules {
        Rules {
            claims: self.native_sending,
            cancel: self.mem.started_applies_cancel_from(from),
            deadlock: self.mem.started_members_have(HeaderFlags::DEADLOCK_AWARE),
        }
    }

    fn apply_item(&mut self, now_ms: u64, item: Item, rules: Rules, out: &mut Vec<Action>) {
        match item {
            Item::Request { from, info, claim } => {
                self.apply_request(now_ms, (from, info, claim, rules), out);
            }
            // the owner's table has it already; every other table becomes it
            Item::State {
                from,
                number,
                state,
            } => {
                if from != self.our && self.owners.owner(number) == Some(from) {
                    let _ = self.plocks.replace_resource(now_ms, number, &state);
                }
            }
            Item::Release { from, number } => {
                if from == self.our {
                    self.local.releasing.remove(&number);
                }
                if self.owners.owner(number) == Some(from) {
                    self.give_back(now_ms, number, rules.claims, out);
                }
            }
            Item::Purge(n) => self.purge(now_ms, n, rules.claims, out),
            Item::Disown(n) => self.disown(now_ms, n, rules.claims, out),
            Item::Sync { from, id } => self.sync_asked(from, id, out),
            Item::Synced { from, id, to } => {
                if to == self.our && self.fresh.answered(id, from) {
                    out.push(Action::Fresh);
                }
            }
        }
    }

    /// A plock dump is asked for: true when it must wait for [`Action::Fresh`] (another
    /// node decides resources locally and the started change answers SYNC: our SYNC goes
    /// out with this turn's batch; a full batch before it into `out`), false when our
    /// table may be dumped now.
    pub fn want_fresh(&mut self, now_ms: u64, out: &mut Vec<Action>) -> bool {
        if self.fresh.is_pending() {
            return true;
        }
        let others_own = self.owners.owning_nodes().any(|n| n != self.our);
        if !self.native_sending
            || !others_own
            || !self.mem.started_members_have(HeaderFlags::NATIVE_SYNC)
            || self.fresh.recent(now_ms)
        {
            return false;
        }
        let Some(id) = self.fresh.ask(now_ms) else {
            return true;
        };
        let sync = PlockInfo {
            number: id,
            ..self.resource_info(0)
        };
        self.push_entry(NativeKind::Sync, &sync, out);
        true
    }

    /// Node `from` asks the owners for their STATEs: if we own resources, ours go out
    /// with the answer behind them; if it was our SYNC, we learn whom to wait for.
    fn sync_asked(&mut self, from: u32, id: u64, out: &mut Vec<Action>) {
        if from == self.our {
            let others = self.owners.owning_nodes().filter(|&n| n != self.our);
            if self.fresh.delivered(id, others) {
                out.push(Action::Fresh);
            }
            return;
        }
        if !self.native_sending
            || self.owners.count(self.our) == 0
            || !self.mem.started_members_have(HeaderFlags::NATIVE_SYNC)
        {
            // not deciding now: our STATEs go before our START, and the asker's dump
            // goes ahead when that change starts; and a member of ours that predates SYNC
            // would refuse the whole batch our SYNCED is in (a SYNC held across the change
            // that brought it)
            return;
        }
        for number in std::mem::take(&mut self.local.dirty) {
            self.local.dirty.insert(number);
            self.send_state(number, out);
        }
        let synced = PlockInfo {
            number: id,
            owner: u64::from(from),
            ..self.resource_info(0)
        };
        self.push_entry(NativeKind::Synced, &synced, out);
    }

    /// The ownership rule (docs/native-mode.md): a request for a resource another node
    /// owns, or one with requests already waiting, waits for the owner to give it back;
    /// anything else is applied, and a claim granted when the resource is the claimer's
    /// alone.
    fn apply_request(&mut self, now_ms: u64, req: Waiting, out: &mut Vec<Action>) {
        let (from, info, claim, rules) = req;
        let number = info.number;
        if from != self.our {
            self.local.saw_shared(number, now_ms);
        }
        if let Some(owner) = self.owners.owner(number) {
            if owner != from || self.owners.recalling(number) {
                let first = self.owners.wait(number, req);
                if first && owner == self.our {
                    self.stats.recalls += 1;
                    self.give_back_ours(number, out);
                }
                return;
            }
        }
        if from == self.our {
            self.local.applied(number);
        }
        self.engine_apply(now_ms, from, &info, rules, out);
        let (held, by) = self.plocks.holders(number);
        let theirs = held == 0 || by.is_some_and(|n| i64::from(n) == i64::from(from));
        if claim
            && rules.claims
            && theirs
            && held <= self.limits.claim_max
            && self.owners.owner(number).is_none()
            && self.owners.count(from) < self.limits.owned_max
        {
            self.owners.grant(number, from);
        }
        if from == self.our && self.owners.owner(number) == Some(self.our) {
            self.check_size(now_ms, number, out);
        }
    }

    /// The owner of `number` is cleared: the resource's waiter pass, which a purge left to
    /// the owner (every replica has the owner's last STATE by now, so the pass is the same
    /// everywhere), then what waited for it, in order, a claim among them granted by the
    /// rules of the give-back's place (`claims`).
    fn give_back(&mut self, now_ms: u64, number: u64, claims: bool, out: &mut Vec<Action>) {
        if self.owners.owner(number) == Some(self.our) {
            self.local.not_ours(number);
        }
        let waiting = self.owners.release(number);
        let mut replies = std::mem::take(&mut self.replies);
        self.plocks.pass(now_ms, number, &mut replies);
        for r in replies.drain(..) {
            self.reply(r.info, out);
        }
        self.replies = replies;
        for (from, info, claim, rules) in waiting {
            let rules = Rules { claims, ..rules };
            self.apply_request(now_ms, (from, info, claim, rules), out);
        }
    }

    /// Everything `node` owns goes back, in number order.
    fn disown(&mut self, now_ms: u64, node: u32, claims: bool, out: &mut Vec<Action>) {
        for number in self.owners.owned_by(node) {
            self.give_back(now_ms, number, claims, out);
        }
    }

    /// `purge_plocks` of a node that left: its locks and waiters go everywhere, and what it
    /// owned goes back. A resource another node owns is left to its owner: it holds nothing
    /// of the node purged, and this replica's copy may be older than the owner's, whose
    /// STATE is on its way — the waiter pass a purge runs would then differ between the
    /// owner and the others (the pass runs at the give-back instead).
    fn purge(&mut self, now_ms: u64, node: u32, claims: bool, out: &mut Vec<Action>) {
        self.owners.drop_requests_of(node);
        let mut replies = Vec::new();
        let owners = &self.owners;
        let owned_by_another = |number| owners.owner(number).is_some_and(|o| o != node);
        let purged = self
            .plocks
            .purge_node_but(now_ms, node, owned_by_another, &mut replies);
        tracing::debug!(target: PLOCK_DEBUG_TARGET, "purged {purged} plocks for {node}");
        for r in replies {
            self.reply(r.info, out);
        }
        self.disown(now_ms, node, claims, out);
    }

    /// The engine applies a request by `rules`; our replies leave in the kernel's order.
    fn engine_apply(
        &mut self,
        now_ms: u64,
        from: u32,
        info: &PlockInfo,
        rules: Rules,
        out: &mut Vec<Action>,
    ) {
        if info.op == dlm_proto::kernel::PlockOp::CANCEL && !rules.cancel {
            // a C member's CANCEL: a C 4.2 originator kept the waiter, so do we, on every
            // node alike (the members' START flags decide, in total order)
            if from == self.our {
                self.reply(
                    PlockInfo {
                        rv: -dlm_proto::errno::EINVAL,
                        ..*info
                    },
                    out,
                );
            }
            return;
        }
        let mut replies = std::mem::take(&mut self.replies);
        // deadlock detection as the started change agreed, on every replica alike
        self.plocks.set_deadlock_detect(rules.deadlock);
        // a message from a node that lies about itself was checked above; the engine's
        // own refusal cannot happen here
        let _ = self.plocks.apply(now_ms, from, info, &mut replies);
        for r in replies.drain(..) {
            self.reply(r.info, out);
        }
        self.replies = replies;
    }

    fn reply(&mut self, info: PlockInfo, out: &mut Vec<Action>) {
        let emit = |r| out.push(Action::Reply(r));
        if self.deciding {
            self.order.answered_last(info, emit);
        } else {
            self.order.answered(info, emit);
        }
    }

    fn release_held(&mut self, e: &LsEnv<'_>, out: &mut Vec<Action>) {
        for (item, rules) in std::mem::take(&mut self.held) {
            self.apply_item(e.now_ms, item, rules, out);
        }
    }

    fn perform(&mut self, e: &LsEnv<'_>, fx: Vec<membership::Action>) -> Vec<Action> {
        let mut out = Vec::new();
        for f in fx {
            match f {
                membership::Action::StopKernel => {
                    // a membership change ends a transfer in progress: what went out is
                    // stale and a joiner of ours starts over at the next start (§5.8)
                    self.sending = None;
                    // what we decided goes out before our START; then no local decision,
                    // no NATIVE message until a native change starts
                    out.extend(self.sync(e.now_ms));
                    self.native_sending = false;
                    self.local.dirty.clear();
                    // our START gives back everything we own
                    self.local.forget_idle();
                    out.push(Action::StopKernel);
                }
                // in its place among the deliveries: a joiner still receiving the table
                // saves it behind what it saved before the confchg (applied before it on
                // every other member), one before its snapshot point has it in the table
                membership::Action::PurgePlocks(n) => self.gate(e, Item::Purge(n), &mut out),
                membership::Action::KickNode(n) => out.push(Action::KickNode(n)),
                membership::Action::SendStart { seq, flags, body } => {
                    let header = DlmHeader {
                        flags: HeaderFlags(flags),
                        msgdata: seq,
                        ..self.header(MsgType::START)
                    };
                    out.push(Action::Send(body.encode(&header)));
                }
                membership::Action::StartKernel {
                    write_id,
                    members,
                    renew,
                    event_done,
                    ..
                } => {
                    // the items held while stopped are applied next, each by the rules of
                    // its place (a claim among them grants nothing); what we send from
                    // here (an owner's RELEASE for a recall among them) counts from now
                    self.change_started();
                    out.push(Action::StartKernel {
                        write_id,
                        members,
                        renew,
                        event_done,
                    });
                }
                membership::Action::Started {
                    plock_data_node,
                    nodes_added,
                    ..
                } => {
                    self.order_resources();
                    // every member's decisions came before its START: a waiting dump goes
                    if self.fresh.end() {
                        out.push(Action::Fresh);
                    }
                    self.prepare_plocks(e, plock_data_node, nodes_added, &mut out);
                }
                membership::Action::Left => {
                    self.left = true;
                    out.push(Action::Left);
                }
            }
            if !self.mem.kernel_stopped() && self.sending.is_none() {
                self.release_held(e, &mut out);
            }
        }
        out
    }

    /// `prepare_plocks` after a kernel start.
    fn prepare_plocks(
        &mut self,
        e: &LsEnv<'_>,
        data_node: u32,
        nodes_added: bool,
        out: &mut Vec<Action>,
    ) {
        if self.mem.started_members().len() == 1 || data_node == 0 {
            // alone, or nobody has plock state. Unlike C, a joiner left alone stops saving
            // (plock-spec §5.8, case 3) and applies what it saved.
            self.finish_transfer(e, out);
            return;
        }
        let flags = self.mem.started_flags();
        let ours = |n: u32| {
            flags
                .iter()
                .any(|&(m, f)| m == n && f & HeaderFlags::CANCEL_AWARE != 0)
        };
        self.generation += 1;
        if self.need_plocks {
            if self.save_plocks && ours(data_node) {
                // a change while we were still receiving (plock-spec §5.8 cases 1, 2: the
                // sender or another member failed): a data node of ours sends the whole
                // table again as of this start, which already holds what we saved; start
                // over instead of finishing with a partial or stale table, as C does
                self.plocks = PlockTable::new(self.our, self.gid, self.seed);
                self.saved.clear();
                if let Some((_, n)) = self.transfer.as_mut() {
                    *n = 0;
                }
            }
            tracing::debug!(target: PLOCK_DEBUG_TARGET, "save_plocks start");
            self.save_plocks = true;
            self.data_from = data_node;
            self.transfer.get_or_insert((e.now_ms, 0));
            return;
        }
        if data_node != self.our {
            return;
        }
        // a member of ours still without the table (its START lacks HAVEPLOCK) gets it again
        // even when nobody joined in this change; a C joiner would apply it twice
        let resend = flags
            .iter()
            .any(|&(_, f)| f & HeaderFlags::HAVEPLOCK == 0 && f & HeaderFlags::CANCEL_AWARE != 0);
        let nodes_added = nodes_added || resend;
        let Some((seq, body)) = self.mem.started_body() else {
            return;
        };
        if !nodes_added {
            out.push(Action::Send(self.plocks_done(seq, 0, &body)));
            return;
        }
        // the table as of this start goes out a portion at a time (`pump`); until the last
        // portion, delivered plock messages wait in `held`, so the table stays as of now
        tracing::debug!(target: PLOCK_DEBUG_TARGET, "send_all_plocks_data {}:{seq}", self.our);
        self.sending = Some(Sending {
            cursor: self.plocks.snapshot_cursor(),
            seq,
            body,
            sent: 0,
        });
        out.extend(self.pump(e, self.limits.transfer_first));
    }

    /// Sending our table to a joiner (`send_all_plocks_data`) is in progress.
    pub fn sending(&self) -> bool {
        self.sending.is_some()
    }

    /// The next at most `max` PLOCKS_DATA messages of the transfer in progress; after the
    /// last, PLOCKS_DONE, and the plock messages held meanwhile are applied.
    pub fn pump(&mut self, e: &LsEnv<'_>, max: usize) -> Vec<Action> {
        let mut out = self.flush();
        let Some(mut st) = self.sending.take() else {
            return out;
        };
        let header = DlmHeader {
            msgdata: st.seq,
            ..self.header(MsgType::PLOCKS_DATA)
        };
        for _ in 0..max {
            let Some(chunk) = st.cursor.next_chunk(&self.plocks) else {
                tracing::debug!(
                    target: PLOCK_DEBUG_TARGET,
                    "send_all_plocks_data {}:{} {} done",
                    self.our,
                    st.seq,
                    st.sent
                );
                out.push(Action::Send(self.plocks_done(st.seq, st.sent, &st.body)));
                out.push(Action::TransferSent { messages: st.sent });
                if !self.mem.kernel_stopped() {
                    self.release_held(e, &mut out);
                }
                return out;
            };
            let mut w = PlocksDataWriter::new(&header, chunk.resource);
            for entry in chunk.entries() {
                w.push(entry);
            }
            tracing::debug!(
                target: PLOCK_TARGET,
                "send_plocks_data {}:{} n {} o {} locks {} len {}",
                self.our,
                st.seq,
                chunk.resource.number,
                chunk.resource.owner,
                w.len(),
                w.as_bytes().len()
            );
            out.push(Action::Send(w.as_bytes().to_vec()));
            st.sent += 1;
        }
        self.sending = Some(st);
        out
    }

    fn plocks_done(&self, seq: u32, count: u32, body: &StartBody) -> Vec<u8> {
        tracing::debug!(
            target: PLOCK_DEBUG_TARGET,
            "send_plocks_done {}:{seq} counts {} {} {} {} {} plocks_data {count}",
            self.our,
            body.started_count,
            body.member_count,
            body.joined_count,
            body.remove_count,
            body.failed_count
        );
        let header = DlmHeader {
            flags: HeaderFlags(HeaderFlags::HAVEPLOCK),
            msgdata: seq,
            msgdata2: count,
            ..self.header(MsgType::PLOCKS_DONE)
        };
        body.encode(&header)
    }

    /// `receive_plocks_done` from the data node: the table is complete; what was saved
    /// meanwhile is applied (`process_saved_plocks`).
    fn receive_plocks_done(
        &mut self,
        e: &LsEnv<'_>,
        from: u32,
        header: &DlmHeader,
        out: &mut Vec<Action>,
    ) {
        let received = self.transfer.map_or(0, |(_, n)| n);
        if received != header.msgdata2 {
            tracing::error!(
                target: PLOCK_DEBUG_TARGET,
                "receive_plocks_done plocks_data {} recv {received}",
                header.msgdata2
            );
        }
        tracing::debug!(target: PLOCK_TARGET, "process_saved_plocks begin");
        let saved = self
            .saved
            .iter()
            .filter(|(i, _)| matches!(i, Item::Request { .. }))
            .count();
        self.finish_transfer(e, out);
        tracing::debug!(target: PLOCK_TARGET, "process_saved_plocks {saved} done");
        tracing::debug!(
            target: PLOCK_DEBUG_TARGET,
            "receive_plocks_done {from}:{} plocks_data_count {received}",
            header.msgdata
        );
    }

    /// The transfer is over (or not needed): replay what was saved.
    fn finish_transfer(&mut self, e: &LsEnv<'_>, out: &mut Vec<Action>) {
        self.generation += 1;
        if let Some((t0, messages)) = self.transfer.take() {
            out.push(Action::TransferReceived {
                messages,
                ms: e.now_ms.saturating_sub(t0),
            });
        }
        self.need_plocks = false;
        self.save_plocks = false;
        self.mem.plocks_ready();
        for info in std::mem::take(&mut self.unsent) {
            self.send_request(e.now_ms, &info, out);
        }
        for (item, rules) in std::mem::take(&mut self.saved) {
            if self.mem.kernel_stopped() {
                self.held.push((item, rules));
            } else {
                self.apply_item(e.now_ms, item, rules, out);
            }
        }
    }

    /// Requests waiting here: our own unsent while the table comes or sent and not yet
    /// applied (in a send queue, in corosync, waiting in a recall), deliveries held while
    /// the lockspace is stopped or our table goes out.
    pub fn backlog(&self) -> usize {
        self.unsent.len() + self.local.in_cpg_total() + self.held.len()
    }

    /// `set_lockspace_info`, for the query sockets.
    pub fn report(&self) -> LsReport {
        let (prev, next) = self.mem.query_changes();
        let change = |c: &Option<ChangeInfo>, wait: WaitCondition| {
            c.as_ref().map_or_else(DlmcChange::default, |c| DlmcChange {
                member_count: c.member_count,
                joined_count: c.joined_count,
                remove_count: c.remove_count,
                failed_count: c.failed_count,
                wait_condition: wait,
                wait_messages: c.wait_messages,
                seq: c.seq,
                combined_seq: c.combined_seq,
            })
        };
        let mut flags = 0;
        if self.mem.is_joining() {
            flags |= LockspaceFlags::JOINING;
        }
        if self.mem.is_leaving() {
            flags |= LockspaceFlags::LEAVING;
        }
        if self.mem.kernel_stopped() {
            flags |= LockspaceFlags::KERNEL_STOPPED;
        }
        if self.need_plocks {
            flags |= LockspaceFlags::NEED_PLOCKS;
        }
        if self.save_plocks {
            flags |= LockspaceFlags::SAVE_PLOCKS;
        }
        LsReport {
            info: DlmcLockspace {
                cg_prev: change(&prev, WaitCondition::None),
                cg_next: change(&next, self.mem.wait_condition()),
                flags: LockspaceFlags(flags),
                global_id: self.gid,
                name: self.name,
            },
            members: prev.map(|c| c.members).unwrap_or_default(),
            next_members: next.map(|c| c.members).unwrap_or_default(),
            history: self
                .mem
                .history()
                .iter()
                .map(|(n, h)| (*n, h.clone()))
                .collect(),
            locks: self.plocks.lock_count(),
            our_locks: self.plocks.our_lock_count(),
            locks_max: self.locks_max,
            waiters: self.plocks.waiter_count(),
            resources: self.plocks.resource_count(),
            oldest_waiter_since_ms: self.plocks.oldest_waiter_since(),
            send_queue: 0,
            owners_in_cycle: self.owners_in_cycle,
        }
    }
}

/// A HELD entry's lock or waiter; its `rv` is its age in seconds (0 from a daemon of ours
/// that predates ages, which fills no field it does not know).
/// Our nonce for this time in the lockspace, from the seed the caller drew for it
/// (splitmix64's finalizer: every bit of the seed moves the nonce).
fn nonce_of(seed: u64) -> u32 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    let [a, b, c, d, ..] = (z ^ (z >> 31)).to_le_bytes();
    u32::from_le_bytes([a, b, c, d])
}

fn held_of(info: &PlockInfo, candidate: bool) -> dlm_plock::Held {
    dlm_plock::Held {
        age_ms: u64::try_from(info.rv).unwrap_or(0) * 1000,
        data: dlm_proto::wire::PlockData {
            start: info.start,
            end: info.end,
            owner: info.owner,
            pid: info.pid,
            nodeid: u32::try_from(info.nodeid).unwrap_or(0),
            ex: info.ex,
            waiter: info.wait,
        },
        candidate,
    }
}

/// The HELD entry of a lock or waiter of the STATE `header` (its age in `rv`, in seconds).
fn info_of(header: &PlockInfo, h: &dlm_plock::Held) -> PlockInfo {
    let d = &h.data;
    PlockInfo {
        rv: i32::try_from(h.age_ms / 1000).unwrap_or(i32::MAX),
        version: dlm_proto::kernel::PLOCK_VERSION,
        op: dlm_proto::kernel::PlockOp::LOCK,
        ex: d.ex,
        wait: d.waiter,
        pid: d.pid,
        nodeid: i32::try_from(d.nodeid).unwrap_or(i32::MAX),
        start: d.start,
        end: d.end,
        owner: d.owner,
        ..*header
    }
}
/// A delivery's header is from its sender and speaks protocol 3.1 (`dlm_header` checks).
fn check_header(h: &DlmHeader, from: u32) -> Result<(), String> {
    if h.nodeid != from {
        return Err(format!("header names node {} as its sender", h.nodeid));
    }
    if h.version.0[..2] != [3, 1] {
        return Err(format!("protocol version {:?}, not 3.1", h.version.0));
    }
    Ok(())
}
