//! One lockspace's task: it owns the lockspace's group and its [`LsCore`], feeds the core
//! group events, kernel requests and polls, and performs the core's actions (kernel writes,
//! multicasts, replies to the plock device).
//!
//! A turn of its loop takes commands (queries, kernel requests) before group events, so
//! none waits behind a stream of deliveries, and does bounded portions of work: queued
//! events, messages handed to corosync, a state transfer's table, a plock dump's lines. The
//! requests it is handed are one batch per turn, their replies written every
//! [`REPLIES_EVERY`] requests. Native mode's STATEs go out every `plock_native_sync_ms`,
//! and a plock dump waits for every owner's decisions first ([`Action::Fresh`]).

use dlm_cpg::Event;
use dlm_proto::LockspaceName;
use dlm_proto::kernel::PlockInfo;
use dlm_proto::wire::lockspace_group_name;
use tokio::sync::mpsc;

use super::LsContext;
use super::cluster::{ClusterGroup, Flush};
pub(crate) use super::direct::Direct;
use crate::config::LockspaceConf;
use crate::kernel::SeamError;
use crate::lscore::{Action, LsCore, LsEnv, LsReport};

/// What the main task tells a lockspace.
#[derive(Debug)]
pub enum LsCommand {
    /// Look again at quorum and fencing for a waiting change: once a second, and from the
    /// main task when the fencing facts changed (no watch registered per turn here).
    Poll,
    /// The kernel released the lockspace (`offline@`).
    Leave,
    /// A plock request read from the kernel (nodeid already ours), and when.
    Plock(PlockInfo, crate::clock::Stamp),
    /// A query: the lockspace's state for `dlm_tool ls`.
    Query(tokio::sync::oneshot::Sender<LsReport>),
    /// A query: the next portion of a plock dump (`None`: a new one, with ages or not).
    DumpPlocks(Option<DumpJob>, bool, tokio::sync::oneshot::Sender<DumpJob>),
    /// `plock_locks_max` changed (`reload_config`; 0: no bound).
    SetLocksMax(usize),
    /// The plock device's reader performed requests in place (`daemon/direct.rs`) and left
    /// the task something its turn waits for: a sync armed, messages queued.
    Wake,
}

/// A seed no local user can know: std's per-process random hash keys (drawn from the OS),
/// for the plock table's index shapes.
fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::hash::RandomState::new().hash_one(std::process::id())
}

use std::sync::atomic::Ordering;

/// Lines of the plock dump made per portion (about 500 KiB of text): between portions the
/// task serves plock requests and events, so a dump of 10⁶ locks never holds the table's
/// task for the whole text.
const DUMP_PORTION_LINES: usize = 8192;

/// A plock dump taken in portions (C's `copy_plock_state` text; with `ages` each line ends
/// in ` age_ms <n>`): the resources it covers, in creation order as the table had them when
/// it began, how far it got, and its text so far.
#[derive(Debug)]
pub struct DumpJob {
    numbers: Vec<u64>,
    next: usize,
    ages: bool,
    pub(crate) text: String,
}

impl DumpJob {
    /// Every resource of the plan is in the text.
    pub fn done(&self) -> bool {
        self.next >= self.numbers.len()
    }

    /// Appends whole resources to the text until at least a portion's lines are added.
    fn portion(&mut self, t: &dlm_plock::Lockspace) {
        use std::fmt::Write;
        let now = crate::clock::monotonic_ms();
        let mut lines = 0;
        while lines < DUMP_PORTION_LINES && !self.done() {
            for e in t.dump_of(self.numbers[self.next], now) {
                lines += 1;
                if self.ages {
                    let line = e.to_string();
                    let _ = writeln!(self.text, "{} age_ms {}", line.trim_end(), e.age_ms);
                } else {
                    let _ = write!(self.text, "{e}");
                }
            }
            self.next += 1;
        }
    }
}

/// Plock requests read from the device and not yet done with, over every lockspace —
/// queued for a task, waiting in a core (unsent while the table comes, held while the
/// lockspace is stopped) or in a send queue corosync has not taken — beyond which the device
/// is not read: the kernel queues them and their processes wait there, instead of this
/// daemon's memory growing while a lockspace is stopped or corosync pushes back (CLOSEs need
/// no reply, so a loop of open and close would otherwise fill it at CPU speed).
pub(crate) const BACKLOG_MAX: usize = 4096;

/// The backlog is over [`BACKLOG_MAX`]. The backlog is the `dlm_plock_backlog` gauge itself
/// (one atomic, exact at every scrape): the main task adds each request it queues for a task,
/// the task takes it out when it takes the request and adds or takes out its own share.
pub(crate) fn over_backlog() -> bool {
    backlog_room() == 0
}

/// Lockspaces in native mode now, over every task (each adds itself while it is).
static NATIVE_NOW: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Some lockspace is in native mode: some request may be answered without a CPG round trip,
/// and so be followed by its process's next one within microseconds (the plock reader's
/// spin pays only then).
pub(crate) fn any_native() -> bool {
    NATIVE_NOW.load(Ordering::Relaxed) > 0
}

/// Requests the device may still be read for before the backlog is over [`BACKLOG_MAX`].
pub(crate) fn backlog_room() -> usize {
    let now = crate::metrics::get().plock_backlog.get();
    let now = usize::try_from(now).unwrap_or(0);
    (BACKLOG_MAX + 1).saturating_sub(now)
}

/// Messages of one batch sent at once; the rest wait in the queue (see `perform`).
const SEND_AT_ONCE: usize = 32;
/// Queued messages handed to corosync per loop turn.
const SEND_PER_TURN: usize = 64;
/// Queued events handled per loop turn besides the one `next_event` returns.
const EVENTS_PER_TURN: usize = 64;
/// Deliveries dispatched per wake-up of the reader for a group it polls (as on the
/// runtime, `AsyncCorosyncGroup`).
const POLLED_BUDGET: usize = 64;
/// Queued commands handled per loop turn besides the first (one batch of requests).
const COMMANDS_PER_TURN: usize = 64;
/// Within a turn, the replies so far are written after every this many queued commands.
pub(super) const REPLIES_EVERY: usize = 4;
/// The capacity of an action vector kept for reuse, at most.
const ACTIONS_KEPT: usize = 256;

/// This lockspace's series, resolved once (a label lookup per message would cost more
/// than the message's own handling in a state transfer).
struct LsMetrics {
    sent: prometheus::IntCounter,
    received: prometheus::IntCounter,
    dropped: prometheus::IntCounter,
    /// By [`crate::metrics::OPS`].
    requests: Vec<prometheus::IntCounter>,
    /// By [`crate::metrics::RESULTS`].
    replies: Vec<prometheus::IntCounter>,
    /// wait=false, wait=true.
    seconds: [prometheus::Histogram; 2],
    /// A blocking request's wait: granted, cancelled.
    waited: [prometheus::Histogram; 2],
    /// role sent, received.
    transfers: [prometheus::IntCounter; 2],
    transfer_messages: [prometheus::IntCounter; 2],
    transfer_seconds: prometheus::Histogram,
    try_again: prometheus::IntCounter,
    native_local: prometheus::IntCounter,
    native_recalls: prometheus::IntCounter,
    native_batches: prometheus::IntCounter,
    handoff: prometheus::Histogram,
    round_trip: prometheus::Histogram,
}

impl LsMetrics {
    fn new(ls: &str) -> Self {
        let m = crate::metrics::get();
        Self {
            sent: m.cpg_sent.with_label_values(&[ls]),
            received: m.cpg_received.with_label_values(&[ls]),
            dropped: m.cpg_dropped.with_label_values(&[ls]),
            requests: crate::metrics::OPS
                .iter()
                .map(|op| m.plock_requests.with_label_values(&[ls, op]))
                .collect(),
            replies: crate::metrics::RESULTS
                .iter()
                .map(|r| m.plock_replies.with_label_values(&[ls, r]))
                .collect(),
            seconds: [
                m.plock_seconds.with_label_values(&[ls, "false"]),
                m.plock_seconds.with_label_values(&[ls, "true"]),
            ],
            waited: [
                m.plock_wait_seconds.with_label_values(&[ls, "granted"]),
                m.plock_wait_seconds.with_label_values(&[ls, "cancelled"]),
            ],
            transfers: [
                m.transfers.with_label_values(&[ls, "sent"]),
                m.transfers.with_label_values(&[ls, "received"]),
            ],
            transfer_messages: [
                m.transfer_messages.with_label_values(&[ls, "sent"]),
                m.transfer_messages.with_label_values(&[ls, "received"]),
            ],
            transfer_seconds: m.transfer_seconds.with_label_values(&[ls]),
            try_again: m.try_again.with_label_values(&[ls]),
            native_local: m.native_local.with_label_values(&[ls]),
            native_recalls: m.native_recalls.with_label_values(&[ls]),
            native_batches: m.native_batches.with_label_values(&[ls]),
            handoff: m.handoff_seconds.with_label_values(&[ls]),
            round_trip: m.round_trip_seconds.with_label_values(&[ls]),
        }
    }
}

/// A lockspace's state and handles, driven by its task's turns and by the plock device's
/// reader ([`Direct`]).
pub(super) struct Shell {
    metrics: LsMetrics,
    core: LsCore,
    /// The name as text (log lines, the plock log's records share it).
    text: std::sync::Arc<str>,
    /// The actions of one request, reused (see [`Self::perform`]).
    actions: Vec<Action>,
    /// Replies to the kernel made this loop turn, in order: written together at its end.
    replies: Vec<crate::kernel::Record>,
    /// For each of those replies to a request of ours: when the request was read, which
    /// histogram takes it, and whether it was a blocking lock granted (its wait counted
    /// too). Observed once the replies are written, with one clock read.
    answered: Vec<(crate::clock::Stamp, bool, bool)>,
    /// Plock dumps waiting for every owner's decisions ([`Action::Fresh`]): with ages or
    /// not, and where the first portion goes.
    fresh_dumps: Vec<(bool, tokio::sync::oneshot::Sender<DumpJob>)>,
    /// Local requests not yet answered, with the time each was read.
    pending: super::outstanding::Outstanding,
    conf: LockspaceConf,
    group: ClusterGroup,
    ctx: LsContext,
    /// Dropped messages are logged at most once a second.
    drop_log: crate::rate::LogEvery,
    /// This task's share of the daemon's backlog last published.
    backlog: usize,
    /// Native counts last published.
    native_seen: crate::lscore::NativeStats,
    /// This task counted in [`NATIVE_NOW`].
    native_counted: bool,
    /// The core's generation of the report last published.
    published: Option<u64>,
    /// Our messages in flight, for the round trip through corosync.
    round_trips: super::round_trip::RoundTrips<crate::clock::Stamp>,
    /// This process's id, which the group's deliveries of our messages carry (read once:
    /// `getpid` is a system call).
    pid: u32,
    /// The next sync of our decisions.
    sync: SyncTimer,
    /// What corosync did with the last flush of the send queue.
    last_flush: Flush,
    /// What the task's turn waits for, as it last looked ([`Waits`]).
    task_view: Waits,
    /// The group failed under the plock device's reader (`polled.rs`): the task ends.
    group_failed: Option<dlm_cpg::CpgError>,
}

/// The next sync of our decisions, armed while some wait for it (one timer kept across
/// turns: a turn registers nothing with the timer wheel).
struct SyncTimer {
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    armed: bool,
    /// The timer went off: sync at the end of this turn.
    now: bool,
}

/// What a turn of the task waits for besides its commands and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Waits {
    /// Messages queued or a state transfer going out: a portion per turn.
    backlog: bool,
    /// Corosync pushed back the last flush: the next after a millisecond.
    pushed_back: bool,
    /// The sync timer.
    sync: bool,
}

impl Shell {
    fn with_env<T>(&mut self, f: impl FnOnce(&mut LsCore, &LsEnv<'_>) -> T) -> T {
        let q = *self.ctx.quorum.borrow();
        let fence = self.ctx.fencing.borrow();
        // one clock read for both
        let now_ms = crate::clock::monotonic_ms();
        let env = LsEnv {
            now: now_ms / 1000,
            now_ms,
            quorate: q.quorate,
            cluster_ring_seq: q.ring_seq,
            quorum_required: fence.quorum_lockspace,
            fencing_enabled: fence.enabled,
            fencing: &*fence,
        };
        f(&mut self.core, &env)
    }

    fn perform(&mut self, mut actions: Vec<Action>) {
        // before anything the kernel or a test can see (event_done): a query that follows
        // it finds the report of the change
        self.publish_report();
        // the first messages of a batch go out at once; the rest of a long one (a state
        // transfer) is queued and handed over a portion per loop turn
        let mut sent = 0usize;
        for a in actions.drain(..) {
            if let Err(e) = self.perform_one(a, &mut sent) {
                tracing::error!("{e}");
            }
        }
        // kept for the next request (a state transfer's long vector is let go)
        if actions.capacity() <= ACTIONS_KEPT {
            self.actions = actions;
        }
    }

    /// One action of the core; `sent` counts this batch's messages (the first
    /// `SEND_AT_ONCE` go out at once, the rest are queued).
    fn perform_one(&mut self, a: Action, sent: &mut usize) -> Result<(), SeamError> {
        match a {
            Action::StopKernel => self.ctx.seam.stop_lockspace(self.core.name()),
            Action::StartKernel {
                write_id,
                members,
                renew,
                event_done,
            } => {
                // set_protocol_stateful: this daemon now has lockspace state
                self.ctx.stateful.store(true, Ordering::Relaxed);
                self.start_kernel(write_id, &members, &renew, event_done)
            }
            Action::Send(bytes) => {
                self.metrics.sent.inc();
                *sent += 1;
                let r = if *sent <= SEND_AT_ONCE {
                    self.group.mcast(&bytes)
                } else {
                    self.group.enqueue(bytes)
                };
                match r {
                    Ok(()) => self.round_trips.sent(crate::clock::Stamp::now()),
                    Err(e) => tracing::error!("multicast: {e}"),
                }
                Ok(())
            }
            Action::Reply(info) => {
                self.count_reply(&info);
                self.replies.push(info.encode());
                Ok(())
            }
            // every owner's decisions are here: the dumps that waited for them begin
            Action::Fresh => {
                for (ages, reply) in std::mem::take(&mut self.fresh_dumps) {
                    self.start_dump(ages, reply);
                }
                Ok(())
            }
            // kick_node_from_cluster: a member whose daemon died (PROCDOWN) leaves the
            // cluster, as C has it do
            Action::KickNode(n) => {
                let _ = self.ctx.kick.send(n);
                Ok(())
            }
            Action::TransferSent { messages } => {
                self.metrics.transfers[0].inc();
                self.metrics.transfer_messages[0].inc_by(u64::from(messages));
                tracing::debug!(messages, "send_plocks_data done {messages} messages");
                Ok(())
            }
            Action::TransferReceived { messages, ms } => {
                self.metrics.transfers[1].inc();
                self.metrics.transfer_messages[1].inc_by(u64::from(messages));
                #[allow(clippy::cast_precision_loss)] // milliseconds, far below 2^52
                self.metrics.transfer_seconds.observe(ms as f64 / 1000.0);
                tracing::debug!(
                    messages,
                    ms,
                    "receive_plocks_done {messages} messages in {ms} ms"
                );
                Ok(())
            }
            Action::Dropped { from, why } => {
                self.dropped(from, &why);
                Ok(())
            }
            // each step on its own: a configfs error must not keep the kernel waiting
            Action::Left => {
                if let Err(e) = self.ctx.seam.set_members(&self.text, &[], &[], &|_| 0) {
                    tracing::error!("{e}");
                }
                unregister(&self.ctx, &self.text);
                self.ctx.seam.event_done(self.core.name(), 0)
            }
        }
    }

    /// A delivered message was dropped: counted, and logged at most once a second.
    fn dropped(&mut self, from: u32, why: &str) {
        self.metrics.dropped.inc();
        if let Some(held) = self.drop_log.allow(crate::clock::monotonic_ms()) {
            tracing::error!(
                from,
                "dropped a message from node {from}: {why} ({held} more not logged)"
            );
        }
    }

    /// `start_kernel`: id, nodir, configfs members, control, event_done.
    fn start_kernel(
        &self,
        write_id: bool,
        members: &[u32],
        renew: &[u32],
        event_done: bool,
    ) -> Result<(), SeamError> {
        let seam = &self.ctx.seam;
        let name = self.core.name();
        if write_id {
            seam.set_lockspace_id(name, self.core.global_id())?;
        }
        if self.conf.nodir {
            seam.set_nodir(name)?;
        }
        seam.set_members(&self.text, members, renew, &|id| self.conf.weight(id))?;
        seam.start_lockspace(name)?;
        if event_done {
            seam.event_done(name, 0)?;
        }
        Ok(())
    }

    /// The replies made so far go to the kernel, in order, as few system calls as it takes.
    fn write_replies(&mut self) {
        if self.replies.is_empty() {
            return;
        }
        if let Some(dev) = self.ctx.device.as_ref() {
            dev.write_records(&self.replies, |e| tracing::error!("plock reply: {e}"));
        }
        self.replies.clear();
        // each answered request's time from read to reply written
        let written = crate::clock::Stamp::now();
        for (t0, wait, granted) in self.answered.drain(..) {
            let secs = written.secs_since(t0);
            self.metrics.seconds[usize::from(wait)].observe(secs);
            if granted {
                self.metrics.waited[0].observe(secs);
            }
        }
        // a burst's vectors are let go
        if self.replies.capacity() > ACTIONS_KEPT {
            self.replies = Vec::new();
            self.answered = Vec::new();
        }
    }

    /// Remembers when a local request was read; forgets the requests that will never be
    /// answered: a cancelled waiter, and an owner's waiters when it closes the file.
    /// A request taken from the command queue: it leaves the daemon's backlog (the main
    /// task counted it in when it queued it) and is tracked until its reply.
    fn take(&mut self, info: &PlockInfo, t0: crate::clock::Stamp) {
        crate::metrics::get().plock_backlog.dec();
        self.track(info, t0);
    }

    fn track(&mut self, info: &PlockInfo, t0: crate::clock::Stamp) {
        use dlm_proto::kernel::PlockOp;
        self.metrics.requests[crate::metrics::op_index(info.op)].inc();
        if info.flags.close() {
            self.pending.closed(info.number, info.owner);
            return;
        }
        if info.op == PlockOp::CANCEL {
            if let Some(t0) = self.pending.cancelled(info) {
                self.metrics.waited[1].observe(crate::clock::Stamp::now().secs_since(t0));
            }
        }
        self.pending.insert(t0, *info);
    }

    /// Publishes this task's own backlog (its core's requests not yet done with, counted
    /// as requests: a NATIVE message in the send queue carries many).
    fn publish_backlog(&mut self) {
        let now = self.core.backlog();
        self.publish_backlog_as(now);
    }

    fn publish_backlog_as(&mut self, now: usize) {
        let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        crate::metrics::get()
            .plock_backlog
            .add(as_i64(now) - as_i64(self.backlog));
        self.backlog = now;
    }

    /// Every request still unanswered when the task ends — queued in `commands` or
    /// outstanding here — is answered as for a lockspace that is gone: each request read
    /// from the kernel gets one reply (a process in F_SETLKW would wait forever).
    fn answer_the_rest(&mut self, commands: &mut mpsc::UnboundedReceiver<LsCommand>) {
        commands.close();
        while let Ok(cmd) = commands.try_recv() {
            if let LsCommand::Plock(info, t0) = cmd {
                self.take(&info, t0);
            }
        }
        let Some(dev) = self.ctx.device.clone() else {
            return;
        };
        let rest = self.pending.take_all();
        if !rest.is_empty() {
            tracing::error!(
                "{} plock requests answered -EEXIST at the lockspace's end",
                rest.len()
            );
        }
        for info in rest {
            super::answer_gone(&dev, &info);
        }
    }

    fn count_reply(&mut self, info: &PlockInfo) {
        self.metrics.replies[crate::metrics::result_index(info.op, info.rv)].inc();
        if let Some(t0) = self.pending.answered(info) {
            let granted = info.wait && info.op == dlm_proto::kernel::PlockOp::LOCK && info.rv == 0;
            self.answered.push((t0, info.wait, granted));
        }
    }

    pub(super) fn command(&mut self, cmd: LsCommand, leave: &mut LeaveRetry) {
        match cmd {
            LsCommand::Poll => {
                self.core.count_cycles();
                let a = self.with_env(|core, env| core.poll(env));
                self.perform(a);
            }
            LsCommand::Plock(info, t0) => self.plock(&info, t0),
            LsCommand::Query(reply) => {
                let mut r = self.core.report();
                r.send_queue = self.group.queued();
                let _ = reply.send(r);
            }
            LsCommand::DumpPlocks(Some(mut job), _, reply) => {
                job.portion(self.core.plocks());
                let _ = reply.send(job);
            }
            // a new dump: first every owner's decisions, if other nodes decide some
            LsCommand::DumpPlocks(None, ages, reply) => {
                let mut a = std::mem::take(&mut self.actions);
                let now_ms = crate::clock::monotonic_ms();
                if self.core.want_fresh(now_ms, &mut a) {
                    self.fresh_dumps.push((ages, reply));
                } else {
                    self.start_dump(ages, reply);
                }
                self.perform(a);
            }
            LsCommand::SetLocksMax(max) => self.core.set_locks_max(max),
            // the turn that follows looks at the timers and the send queue again
            LsCommand::Wake => {}
            LsCommand::Leave => {
                self.core.leave();
                leave.attempt(&mut self.group);
            }
        }
    }

    /// The lockspace has been left: its task is ending.
    pub(super) fn is_left(&self) -> bool {
        self.core.is_left()
    }

    /// The lockspace's name (log lines name it).
    pub(super) fn name(&self) -> &std::sync::Arc<str> {
        &self.text
    }

    /// A plock request read from the kernel at `t0`, taken from the queue or performed in
    /// place by the device's reader.
    pub(super) fn plock(&mut self, info: &PlockInfo, t0: crate::clock::Stamp) {
        // one clock read: the hand-off's time and the core's
        let now = crate::clock::Stamp::now();
        self.metrics.handoff.observe(now.secs_since(t0));
        self.take(info, t0);
        let mut a = std::mem::take(&mut self.actions);
        // a request decided here logs its `read plock` line alone, as C's ownership mode
        // logs one its owner applies (process_plocks): no delivery, no receive line
        self.core.request(now.ms(), info, &mut a);
        self.perform(a);
        // the request moved from the queue into our share at once: the device's reader
        // must never see it in neither (it would read past the bound)
        self.publish_backlog();
    }

    /// A plock dump begins: its plan (the resources in the dump's order) and its first
    /// portion.
    fn start_dump(&self, ages: bool, reply: tokio::sync::oneshot::Sender<DumpJob>) {
        let mut job = DumpJob {
            numbers: self.core.dump_plan(),
            next: 0,
            ages,
            text: String::new(),
        };
        job.portion(self.core.plocks());
        let _ = reply.send(job);
    }

    /// The native batch: requests and releases go at the end of the turn that made them;
    /// the STATEs of what we decided every `plock_native_sync_ms` (the timer is armed when
    /// the first decision waits, so the clock is read once per sync, not per request).
    fn send_batch(&mut self) {
        if self.core.batch_urgent() {
            let a = self.core.flush();
            self.perform(a);
        }
        if std::mem::take(&mut self.sync.now) {
            self.sync.armed = false;
            let a = self.core.sync(crate::clock::monotonic_ms());
            self.perform(a);
        }
        if self.core.batch_pending() && !self.sync.armed {
            if let Some(every) = self.ctx.plock.native_sync {
                self.sync
                    .timer
                    .as_mut()
                    .reset(tokio::time::Instant::now() + every);
                self.sync.armed = true;
            }
        }
        self.publish_native();
    }

    /// Publishes the report for the query socket when membership may have changed.
    fn publish_report(&mut self) {
        let g = self.core.generation();
        // a lockspace left is unregistered, not published again
        if self.published == Some(g) || self.core.is_left() {
            return;
        }
        self.published = Some(g);
        let r = std::sync::Arc::new(self.core.report());
        if let Some(p) = super::query::PUBLISHED.get() {
            if let Ok(mut m) = p.lock() {
                m.insert(self.text.to_string(), r);
            }
        }
    }

    fn publish_native(&mut self) {
        let now = self.core.native_stats();
        let m = &self.metrics;
        m.native_local.inc_by(now.local - self.native_seen.local);
        m.native_recalls
            .inc_by(now.recalls - self.native_seen.recalls);
        m.native_batches
            .inc_by(now.batches - self.native_seen.batches);
        self.native_seen = now;
        self.count_native(self.core.is_native());
    }

    /// Counts this lockspace in [`NATIVE_NOW`] while it is native.
    fn count_native(&mut self, native: bool) {
        if native != std::mem::replace(&mut self.native_counted, native) {
            if native {
                NATIVE_NOW.fetch_add(1, Ordering::Relaxed);
            } else {
                NATIVE_NOW.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn event(&mut self, ev: Event) {
        if let Event::Deliver { nodeid, pid, .. } = ev {
            self.metrics.received.inc();
            if nodeid == self.ctx.our && pid == self.pid {
                if let Some(t) = self.round_trips.delivered() {
                    self.metrics
                        .round_trip
                        .observe(crate::clock::Stamp::now().secs_since(t));
                }
            }
        }
        let mut a = std::mem::take(&mut self.actions);
        self.with_env(|core, env| core.event_into(env, ev, &mut a));
        self.perform(a);
    }

    /// The group's next event, handled as soon as it is taken.
    fn next_event(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), dlm_cpg::CpgError>> {
        let ev = std::task::ready!(self.group.poll_next_event(cx))?;
        self.event(ev);
        std::task::Poll::Ready(Ok(()))
    }

    /// The fd the plock device's reader polls for this group, when it dispatches it.
    pub(super) fn polled_fd(&self) -> Option<std::os::fd::RawFd> {
        self.group.polled_fd()
    }

    /// The reader found the group ready (`polled.rs`): what corosync has, up to a budget,
    /// dispatched and handled as the task's `next_event` would, then the turn's end
    /// ([`Self::after_direct`]). `Some(wake)`: the task must be woken (as `after_direct`
    /// says, or the leave is done); `None`: the group failed (or hung up with nothing to
    /// dispatch), kept for the task, which ends.
    pub(super) fn dispatch_polled(&mut self, hangup: bool) -> Option<bool> {
        let r = self.group.dispatch_some(POLLED_BUDGET);
        while let Some(ev) = self.group.poll_event() {
            self.event(ev);
        }
        let failed = match r {
            Err(e) => Some(e),
            Ok(_) if hangup => Some(dlm_cpg::CpgError::Closed),
            Ok(_) => None,
        };
        let wake = self.after_direct() || self.is_left();
        if failed.is_some() {
            self.group_failed = failed;
            return None;
        }
        Some(wake)
    }

    /// A failure of the group under the reader, once.
    fn take_group_failure(&mut self) -> Option<dlm_cpg::CpgError> {
        self.group_failed.take()
    }

    /// Handles events already queued, a bounded number per loop turn (the rest come
    /// through `next_event`), so a flood of deliveries does not starve queries.
    fn drain(&mut self) {
        for _ in 0..EVENTS_PER_TURN {
            let Some(ev) = self.group.poll_event() else {
                return;
            };
            self.event(ev);
        }
    }
}

/// Removes this lockspace's task from the registry (its own entry: no other can be added
/// while it is there).
fn unregister(ctx: &LsContext, name: &str) {
    if let Ok(mut m) = ctx.registry.lock() {
        m.remove(name);
    }
    if let Some(Ok(mut m)) = super::query::PUBLISHED.get().map(|p| p.lock()) {
        m.remove(name);
    }
}

/// A `cpg_leave` that corosync pushed back (TRY_AGAIN), tried again until it is taken.
#[derive(Debug, Default)]
pub(super) struct LeaveRetry {
    pending: bool,
    log: crate::rate::LogEvery,
}

impl LeaveRetry {
    const PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

    fn attempt(&mut self, group: &mut ClusterGroup) {
        match group.leave() {
            Err(dlm_cpg::CpgError::TryAgain) => {
                if !self.pending || self.log.allow(crate::clock::monotonic_ms()).is_some() {
                    tracing::debug!("cpg_leave retry");
                }
                self.pending = true;
            }
            Err(e) => {
                self.pending = false;
                tracing::error!("cpg_leave: {e}");
            }
            Ok(()) => self.pending = false,
        }
    }
}

/// The task of one lockspace, from `online@` to the end of its leave. Its shell is shared
/// with the plock device's reader through `direct` while it runs.
pub(crate) async fn run(
    name: LockspaceName,
    conf: LockspaceConf,
    ctx: LsContext,
    direct: std::sync::Arc<Direct>,
    mut commands: mpsc::UnboundedReceiver<LsCommand>,
) {
    let Some(ls) = Shell::start(name, conf, ctx).await else {
        return;
    };
    direct.put(ls);
    let mut turn = Turn::default();
    while direct.with(|ls| ls.is_left()) == Some(false) {
        if !turn_once(&direct, &mut turn, &mut commands).await {
            break;
        }
    }
    // from now on every request is queued, and answered as for a lockspace gone
    if let Some(ls) = direct.take() {
        ls.finish(commands).await;
    }
}

/// What one turn of the task's loop leaves to the next.
#[derive(Default)]
struct Turn {
    count: u32,
    leave: LeaveRetry,
}

/// One turn: the first input ready, then what it left to send. `false` when the task
/// must end (its command channel closed, or its group failed). The shell is locked for
/// each step, never across a wait, so the device's reader may perform requests in between.
async fn turn_once(
    direct: &Direct,
    t: &mut Turn,
    commands: &mut mpsc::UnboundedReceiver<LsCommand>,
) -> bool {
    use std::task::Poll;
    // give the scheduler (and tokio's per-task budget) a turn now and then: while
    // deliveries stream in, the event branch is always ready and would otherwise keep
    // the command branch (queries, kernel requests) waiting behind the whole stream
    t.count = t.count.wrapping_add(1);
    if t.count % 16 == 0 {
        tokio::task::yield_now().await;
    }
    let Some(w) = direct.with(Shell::look) else {
        return false;
    };
    tokio::select! {
        // commands first: a query or a kernel request never waits behind a stream
        biased;
        cmd = commands.recv() => match cmd {
            Some(cmd) => take_commands(direct, t, cmd, commands).await,
            None => return false,
        },
        // an event is handled under the lock it was taken under: the device's reader,
        // on its own thread, handles the events queued after it at its turn's end
        // (`Shell::drain`), and must never handle them before it
        ev = std::future::poll_fn(|cx| {
            direct.with(|ls| ls.next_event(cx)).unwrap_or(Poll::Pending)
        }) => if let Err(e) = ev {
            tracing::error!("{e}");
            return false;
        },
        // a backlog (a big state transfer, a storm): a portion per turn, right away
        // after a full portion, a millisecond after corosync's TRY_AGAIN; events,
        // plock requests and queries keep being served in between
        () = async {
            if w.pushed_back {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            } else {
                tokio::task::yield_now().await;
            }
        }, if w.backlog => {}
        // cpg_leave met TRY_AGAIN: again shortly, as cpg_join is retried (a select
        // builds every branch's future each turn, disabled or not: the timer is made
        // inside, so a turn without a leave pending reads no clock)
        () = async { tokio::time::sleep(LeaveRetry::PAUSE).await }, if t.leave.pending => {
            direct.with(|ls| t.leave.attempt(&mut ls.group));
        }
        // decided entries waiting for company: they go now
        () = std::future::poll_fn(|cx| {
            direct.with(|ls| ls.sync.timer.as_mut().poll(cx)).unwrap_or(Poll::Pending)
        }), if w.sync => {
            direct.with(|ls| ls.sync.now = true);
        }
    }
    // the turn's end, and a failure of the group under the reader, in one hold
    let failed = direct.with(|ls| {
        ls.after_turn();
        ls.take_group_failure()
    });
    if let Some(Some(e)) = failed {
        tracing::error!("{e}");
        return false;
    }
    true
}

/// A command and those queued behind it, up to [`COMMANDS_PER_TURN`]: the requests read
/// meanwhile join this turn's batch; their replies go out every few requests, so the
/// processes answered first run while the rest are decided (one write for a whole turn
/// made them and the daemon take turns, each idle while the other worked).
async fn take_commands(
    direct: &Direct,
    t: &mut Turn,
    first: LsCommand,
    commands: &mut mpsc::UnboundedReceiver<LsCommand>,
) {
    direct.command(first, &mut t.leave);
    for i in 1..=COMMANDS_PER_TURN {
        let Ok(cmd) = commands.try_recv() else { break };
        direct.command(cmd, &mut t.leave);
        if i % REPLIES_EVERY == 0 {
            direct.with(Shell::write_replies);
            // the daemon's other tasks have their turn; what those processes send next
            // meanwhile joins this batch (the reader, on its own thread, queues behind
            // the requests still waiting here)
            tokio::task::yield_now().await;
        }
    }
}

impl Shell {
    /// The lockspace's group joined and its shell set up; on a failed `cpg_join` the
    /// kernel's join is failed (event_done -1) and there is no task.
    async fn start(name: LockspaceName, conf: LockspaceConf, ctx: LsContext) -> Option<Self> {
        let text = name.to_str_lossy().into_owned();
        let (buf, len) = lockspace_group_name(&name);
        let polled = ctx.bell.is_some();
        let group = match ClusterGroup::join(ctx.embedded, ctx.our, &buf[..len], polled).await {
            Ok(g) => g,
            Err(e) => {
                // cpg_join failed: the kernel's join fails with event_done = -1
                tracing::error!("cpg_join: {e}");
                unregister(&ctx, &text);
                let _ = ctx.seam.event_done(&name, -1);
                let _ = ctx.done.send(text);
                return None;
            }
        };
        let mut ls = Self {
            metrics: LsMetrics::new(&text),
            core: LsCore::new(name, ctx.our, ctx.embedded, random_seed()),
            text: std::sync::Arc::from(text.as_str()),
            actions: Vec::new(),
            replies: Vec::new(),
            answered: Vec::new(),
            fresh_dumps: Vec::new(),
            pending: super::outstanding::Outstanding::default(),
            conf,
            group,
            ctx,
            drop_log: crate::rate::LogEvery::default(),
            backlog: 0,
            native_seen: crate::lscore::NativeStats::default(),
            native_counted: false,
            published: None,
            round_trips: super::round_trip::RoundTrips::default(),
            pid: std::process::id(),
            sync: SyncTimer {
                timer: Box::pin(tokio::time::sleep(std::time::Duration::ZERO)),
                armed: false,
                now: false,
            },
            last_flush: Flush::Empty,
            task_view: Waits::default(),
            group_failed: None,
        };
        let plock = ls.ctx.plock;
        ls.core.set_native(plock.native);
        ls.core.set_deadlock_detect(plock.deadlock);
        ls.core.set_c_peers_cancel(plock.c_peers_cancel);
        ls.core.set_locks_max(plock.locks_max);
        ls.drain();
        Some(ls)
    }

    /// What the coming turn waits for besides commands and events, remembered as the
    /// task's view (the device's reader wakes the task when it changes that).
    fn look(&mut self) -> Waits {
        self.task_view = self.waits();
        self.task_view
    }

    fn waits(&mut self) -> Waits {
        Waits {
            backlog: self.group.queued() > 0 || self.core.sending(),
            pushed_back: self.last_flush == Flush::PushedBack,
            sync: self.sync.armed,
        }
    }

    /// The requests the device's reader performed in place since the last call end as a
    /// turn of the task does ([`Self::after_turn`]: the events they brought handled — the
    /// embedded group delivers our own messages at once, and nothing wakes the task for
    /// them —, replies written, messages sent); `true` when the task must be woken: the
    /// turn it waits in does not wait for what they left (a sync armed, messages queued).
    pub(super) fn after_direct(&mut self) -> bool {
        self.after_turn();
        let now = self.waits();
        let view = self.task_view;
        let wake = (now.backlog && !view.backlog) || (now.sync && !view.sync);
        if wake {
            self.task_view = now;
        }
        wake
    }

    /// What every turn ends with: replies out, batches and transfer portions sent, the
    /// backlog and the report published.
    fn after_turn(&mut self) {
        self.drain();
        self.write_replies();
        self.send_batch();
        // a state transfer going out: the next portion once corosync has taken the last
        if self.core.sending() && self.group.queued() < SEND_PER_TURN {
            let a = self.with_env(|core, env| core.pump(env, SEND_PER_TURN));
            self.perform(a);
        }
        match self.group.flush_some(SEND_PER_TURN) {
            Ok(f) => {
                if f == Flush::PushedBack {
                    self.metrics.try_again.inc();
                }
                self.last_flush = f;
            }
            Err(e) => tracing::error!("multicast: {e}"),
        }
        self.publish_backlog();
        self.publish_report();
    }

    /// The task ends: what is queued goes out, the group is finalized, the requests still
    /// waiting are answered, and the main task hears of it.
    async fn finish(mut self, mut commands: mpsc::UnboundedReceiver<LsCommand>) {
        self.write_replies();
        // what is still queued goes out before the task ends (a leave's last messages)
        for _ in 0..5000 {
            match self.group.try_flush() {
                Ok(false) => tokio::time::sleep(std::time::Duration::from_millis(1)).await,
                _ => break,
            }
        }
        // the group is finalized before the main task hears we are done: a join of the same
        // lockspace that follows at once must not meet our handle still in the group
        let done = self.ctx.done.clone();
        let text = self.text.to_string();
        self.answer_the_rest(&mut commands);
        self.publish_backlog_as(0);
        self.count_native(false);
        if !self.core.is_left() {
            // ended without a leave (corosync went away): still registered, nothing replaced us
            unregister(&self.ctx, &text);
        }
        drop(self);
        let _ = done.send(text);
    }
}
