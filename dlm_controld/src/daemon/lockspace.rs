//! One lockspace's task: it owns the lockspace's group and membership machine, turns group
//! events into machine inputs and machine effects into kernel writes and messages.

use dlm_cpg::Event;
use dlm_plock::Lockspace as PlockTable;
use dlm_proto::LockspaceName;
use dlm_proto::kernel::PlockInfo;
use dlm_proto::wire::{
    Body, Change as StartBody, DlmHeader, HeaderFlags, Message, MsgType, PlockData,
    PlocksDataWriter, ResourceData, Version3, encode_plock_msg, global_id, lockspace_group_name,
};
use tokio::sync::mpsc;

use super::cluster::LsGroup;
use super::{LsContext, monotonic_secs, startup};
use crate::config::LockspaceConf;
use crate::kernel::KernelRoot;
use crate::membership::{Effect, Env, FenceView, Membership};

/// What the main task tells a lockspace.
#[derive(Debug)]
pub enum LsCommand {
    /// Retry a waiting change (once a second).
    Poll,
    /// The kernel released the lockspace (`offline@`).
    Leave,
    /// A plock request read from the kernel (nodeid already ours).
    Plock(PlockInfo),
    /// A query: the lockspace's state for `dlm_tool ls`.
    Query(tokio::sync::oneshot::Sender<LsReport>),
    /// A query: the plock table as `dlm_tool plocks` prints it.
    DumpPlocks(tokio::sync::oneshot::Sender<String>),
}

/// A lockspace as the query sockets report it.
#[derive(Debug, Clone)]
pub struct LsReport {
    /// The `dlmc_lockspace` record.
    pub info: dlm_proto::query::DlmcLockspace,
    /// Members of the started change.
    pub members: Vec<u32>,
    /// Members of the newest pending change.
    pub next_members: Vec<u32>,
    /// Node history for node queries.
    pub history: Vec<(u32, crate::membership::NodeHistory)>,
}

/// A plock-related message saved while we wait for the state transfer.
#[derive(Debug, Clone)]
struct Saved {
    from: u32,
    info: PlockInfo,
}

/// Plock work held while the lockspace is stopped for a membership change: applied in
/// delivery order when the change completes (quorum and fencing allowed it).
#[derive(Debug, Clone)]
enum Held {
    Plock(u32, PlockInfo),
    Purge(u32),
}

/// Fencing is not implemented yet: nothing to wait for (the daemon runs as with
/// `enable_fencing=0`).
#[derive(Debug)]
struct NoFencing;

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

struct Ls {
    name: LockspaceName,
    text: String,
    gid: u32,
    conf: LockspaceConf,
    seam: KernelRoot,
    our: u32,
    group: LsGroup,
    mem: Membership,
    ring: u64,
    ctx: LsContext,
    left: bool,
    /// The replicated plock table.
    plocks: PlockTable,
    /// We joined and have no plock state yet.
    need_plocks: bool,
    /// Plock messages are saved until the state transfer ends (`save_plocks`).
    save_plocks: bool,
    saved: Vec<Saved>,
    held: Vec<Held>,
    plock_replies: Vec<dlm_plock::Reply>,
}

impl Ls {
    fn env<'a>(&self, fence: &'a NoFencing) -> Env<'a> {
        let q = *self.ctx.quorum.borrow();
        Env {
            now: monotonic_secs(),
            // the embedded group has no quorum service: its own ring is the cluster's
            cluster_ring_seq: if self.ctx.embedded {
                self.ring
            } else {
                q.ring_seq
            },
            quorate: q.quorate,
            quorum_required: true,
            fencing_enabled: false,
            fencing: fence,
        }
    }

    fn perform(&mut self, fx: Vec<Effect>) {
        for e in fx {
            let r = match e {
                Effect::StopKernel => self.seam.sysfs_write(&self.name, "control", "0"),
                Effect::StartKernel {
                    write_id,
                    members,
                    renew,
                    event_done,
                    ..
                } => self.start_kernel(write_id, &members, &renew, event_done),
                Effect::SendStart { seq, flags, body } => {
                    let header = DlmHeader {
                        global_id: self.gid,
                        flags: HeaderFlags(flags),
                        msgdata: seq,
                        ..DlmHeader::new(Version3([3, 1, 1]), MsgType::START, self.our)
                    };
                    let _ = self.group.mcast(&body.encode(&header));
                    Ok(())
                }
                Effect::Started {
                    plock_data_node,
                    nodes_added,
                    ..
                } => {
                    self.prepare_plocks(plock_data_node, nodes_added);
                    Ok(())
                }
                Effect::Left => {
                    self.left = true;
                    startup::set_members(&self.seam, &self.text, &[], &[], |_| 0)
                        .and_then(|()| self.seam.sysfs_write(&self.name, "event_done", "0"))
                }
                Effect::PurgePlocks(n) => {
                    // the kernel was just stopped: held with the messages, in order
                    self.held.push(Held::Purge(n));
                    Ok(())
                }
                Effect::KickNode(_) => Ok(()),
            };
            if let Err(e) = r {
                eprintln!("dlm_controld: {}: {e}", self.text);
            }
            if !self.mem.kernel_stopped() {
                self.release_held();
            }
        }
    }

    /// Applies what was held while the lockspace was stopped (safety beyond C: a purge
    /// followed by grants waits until quorum and fencing let the lockspace start, so a
    /// minority partition cannot grant a range the majority also grants).
    fn release_held(&mut self) {
        for h in std::mem::take(&mut self.held) {
            match h {
                Held::Plock(from, info) => self.apply_plock(from, &info),
                Held::Purge(n) => {
                    let mut out = std::mem::take(&mut self.plock_replies);
                    self.plocks.purge_node(now_ms(), n, &mut out);
                    self.plock_replies = out;
                    self.write_replies();
                }
            }
        }
    }

    /// `start_kernel`: id, nodir, configfs members, control, event_done.
    fn start_kernel(
        &self,
        write_id: bool,
        members: &[u32],
        renew: &[u32],
        event_done: bool,
    ) -> Result<(), crate::kernel::SeamError> {
        if write_id {
            self.seam
                .sysfs_write(&self.name, "id", &self.gid.to_string())?;
        }
        if self.conf.nodir {
            self.seam.sysfs_write(&self.name, "nodir", "1")?;
        }
        startup::set_members(&self.seam, &self.text, members, renew, |id| {
            self.conf.weight(id)
        })?;
        self.seam.sysfs_write(&self.name, "control", "1")?;
        if event_done {
            self.seam.sysfs_write(&self.name, "event_done", "0")?;
        }
        Ok(())
    }

    /// `set_lockspace_info`
    fn report(&self) -> LsReport {
        use dlm_proto::query::{DlmcChange, DlmcLockspace, LockspaceFlags, WaitCondition};
        let (prev, next) = self.mem.query_changes();
        let change = |c: &Option<crate::membership::ChangeInfo>, wait: WaitCondition| {
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
        }
    }

    fn header(&self, t: MsgType) -> DlmHeader {
        DlmHeader {
            global_id: self.gid,
            ..DlmHeader::new(Version3([3, 1, 1]), t, self.our)
        }
    }

    /// A kernel request: multicast it; it is applied when CPG delivers it back.
    fn send_plock(&mut self, info: &PlockInfo) {
        let bytes = encode_plock_msg(&self.header(MsgType::PLOCK), info);
        if let Err(e) = self.group.mcast(&bytes) {
            eprintln!("dlm_controld: {}: plock multicast: {e}", self.text);
        }
    }

    /// `_receive_plock` gating (cpg.c `deliver_cb`): ignored before our snapshot point,
    /// saved during the transfer, applied otherwise.
    fn deliver_plock(&mut self, from: u32, info: PlockInfo) {
        if self.need_plocks && !self.save_plocks {
            return;
        }
        if self.save_plocks {
            self.saved.push(Saved { from, info });
            return;
        }
        if self.mem.kernel_stopped() {
            self.held.push(Held::Plock(from, info));
            return;
        }
        self.apply_plock(from, &info);
    }

    fn apply_plock(&mut self, from: u32, info: &PlockInfo) {
        let mut out = std::mem::take(&mut self.plock_replies);
        if let Err(e) = self.plocks.apply(now_ms(), from, info, &mut out) {
            eprintln!("dlm_controld: {}: {e}", self.text);
        }
        self.plock_replies = out;
        self.write_replies();
    }

    fn write_replies(&mut self) {
        for r in self.plock_replies.drain(..) {
            if let Some(dev) = self.ctx.device.as_ref() {
                if let Err(e) = dev.write_record(&r.info.encode()) {
                    eprintln!("dlm_controld: plock reply: {e}");
                }
            }
        }
    }

    /// `prepare_plocks` after a kernel start.
    fn prepare_plocks(&mut self, data_node: u32, nodes_added: bool) {
        if self.mem.started_members().len() == 1 || data_node == 0 {
            // alone, or nobody has plock state: nothing to transfer. Unlike C, a joiner
            // left alone stops saving (plock-spec §5.8, case 3) and applies what it saved.
            self.finish_transfer();
            return;
        }
        if self.need_plocks {
            self.save_plocks = true;
            return;
        }
        if data_node != self.our {
            return;
        }
        let Some((seq, body)) = self.mem.started_body() else {
            return;
        };
        let mut sent = 0u32;
        if nodes_added {
            sent = self.send_plocks_data(seq);
        }
        self.send_plocks_done(seq, sent, &body);
    }

    /// `send_all_plocks_data`: the snapshot, one PLOCKS_DATA per chunk.
    fn send_plocks_data(&mut self, seq: u32) -> u32 {
        let header = DlmHeader {
            msgdata: seq,
            ..self.header(MsgType::PLOCKS_DATA)
        };
        let chunks: Vec<(ResourceData, Vec<PlockData>)> = self
            .plocks
            .snapshot()
            .map(|c| (c.resource, c.entries().collect()))
            .collect();
        let mut n = 0u32;
        for (resource, entries) in chunks {
            let mut w = PlocksDataWriter::new(&header, resource);
            for e in entries {
                w.push(e);
            }
            if let Err(e) = self.group.mcast(w.as_bytes()) {
                eprintln!("dlm_controld: {}: plock state multicast: {e}", self.text);
            }
            n += 1;
        }
        n
    }

    fn send_plocks_done(&mut self, seq: u32, count: u32, body: &StartBody) {
        let header = DlmHeader {
            flags: HeaderFlags(HeaderFlags::HAVEPLOCK),
            msgdata: seq,
            msgdata2: count,
            ..self.header(MsgType::PLOCKS_DONE)
        };
        let _ = self.group.mcast(&body.encode(&header));
    }

    /// `receive_plocks_done`: the state is complete; replay what was saved.
    fn plocks_done(&mut self) {
        if !(self.need_plocks && self.save_plocks) {
            return;
        }
        self.finish_transfer();
    }

    fn finish_transfer(&mut self) {
        self.need_plocks = false;
        self.save_plocks = false;
        self.mem.plocks_ready();
        for s in std::mem::take(&mut self.saved) {
            self.apply_plock(s.from, &s.info);
        }
    }

    fn drain(&mut self) {
        while let Some(ev) = self.group.poll_event() {
            self.event(ev);
        }
    }

    fn event(&mut self, ev: Event) {
        let fence = NoFencing;
        {
            let env = self.env(&fence);
            let fx = match ev {
                Event::Totem { ring, .. } => {
                    self.ring = ring.seq;
                    // only the embedded group takes its own ring as the cluster's; on
                    // corosync the quorum service's ring must catch up (check_ringid_done)
                    let env = if self.ctx.embedded {
                        Env {
                            cluster_ring_seq: ring.seq,
                            ..env
                        }
                    } else {
                        env
                    };
                    self.mem.handle_totem(&env, ring.seq)
                }
                Event::ConfChg {
                    members,
                    left,
                    joined,
                } => self.mem.handle_confchg(
                    &env,
                    &members.iter().map(|m| m.nodeid).collect::<Vec<_>>(),
                    &left
                        .iter()
                        .map(|m| (m.nodeid, m.reason.to_raw()))
                        .collect::<Vec<_>>(),
                    &joined.iter().map(|m| m.nodeid).collect::<Vec<_>>(),
                ),
                Event::Deliver {
                    nodeid, payload, ..
                } => match Message::decode(&payload) {
                    // validated as deliver_cb does: sender, and the negotiated major.minor
                    Ok(Message { header, body })
                        if header.nodeid == nodeid && header.version.0[..2] == [3, 1] =>
                    {
                        match body {
                            Body::Start(c) => self.mem.handle_start(
                                &env,
                                nodeid,
                                header.flags.0,
                                header.msgdata,
                                &c,
                            ),
                            Body::Plock(info) => {
                                self.deliver_plock(nodeid, info);
                                Vec::new()
                            }
                            Body::PlocksData(d) => {
                                if self.need_plocks && self.save_plocks {
                                    if let Err(e) =
                                        self.plocks.restore(now_ms(), d.resource, d.entries())
                                    {
                                        eprintln!(
                                            "dlm_controld: {}: plock state from {nodeid}: {e}",
                                            self.text
                                        );
                                    }
                                }
                                Vec::new()
                            }
                            Body::PlocksDone(_) => {
                                self.plocks_done();
                                Vec::new()
                            }
                            _ => Vec::new(),
                        }
                    }
                    // foreign or malformed: dropped
                    _ => Vec::new(),
                },
            };
            self.perform(fx);
        }
    }
}

/// The task of one lockspace, from `online@` to the end of its leave.
pub(crate) async fn run(
    name: LockspaceName,
    conf: LockspaceConf,
    ctx: LsContext,
    mut commands: mpsc::UnboundedReceiver<LsCommand>,
) {
    let text = name.to_str_lossy().into_owned();
    let (buf, len) = lockspace_group_name(&name);
    let group = match LsGroup::join(ctx.embedded, ctx.our, &buf[..len]).await {
        Ok(g) => g,
        Err(e) => {
            // cpg_join failed: the kernel's join fails with event_done = -1
            eprintln!("dlm_controld: {text}: cpg_join: {e}");
            let _ = ctx.seam.sysfs_write(&name, "event_done", "-1");
            let _ = ctx.done.send(text);
            return;
        }
    };
    let mut quorum = ctx.quorum.clone();
    let mut ls = Ls {
        gid: global_id(&name),
        name,
        text: text.clone(),
        conf,
        seam: ctx.seam.clone(),
        our: ctx.our,
        group,
        mem: Membership::joining(ctx.our),
        ring: 0,
        plocks: PlockTable::new(ctx.our, global_id(&name)),
        ctx: ctx.clone(),
        left: false,
        need_plocks: true,
        save_plocks: false,
        saved: Vec::new(),
        held: Vec::new(),
        plock_replies: Vec::new(),
    };
    ls.drain();
    while !ls.left {
        tokio::select! {
            ev = ls.group.next_event() => match ev {
                Ok(ev) => ls.event(ev),
                Err(e) => {
                    eprintln!("dlm_controld: {text}: {e}");
                    break;
                }
            },
            cmd = commands.recv() => match cmd {
                Some(LsCommand::Poll) => {
                    let fence = NoFencing;
                    let env = ls.env(&fence);
                    let fx = ls.mem.poll(&env);
                    ls.perform(fx);
                }
                Some(LsCommand::Plock(info)) => ls.send_plock(&info),
                Some(LsCommand::Query(reply)) => {
                    let _ = reply.send(ls.report());
                }
                Some(LsCommand::DumpPlocks(reply)) => {
                    let _ = reply.send(ls.plocks.dump_text());
                }
                Some(LsCommand::Leave) => {
                    ls.mem.leave();
                    if let Err(e) = ls.group.leave() {
                        eprintln!("dlm_controld: {text}: cpg_leave: {e}");
                    }
                }
                None => break,
            },
            Ok(()) = quorum.changed() => {
                let fence = NoFencing;
                let env = ls.env(&fence);
                let fx = ls.mem.poll(&env);
                ls.perform(fx);
            }
        }
        ls.drain();
        let _ = ls.group.flush().await;
    }
    let _ = ls.ctx.done.send(text);
}

/// Monotonic milliseconds, for plock ages.
fn now_ms() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1000
                + u64::try_from(t.tv_nsec()).unwrap_or(0) / 1_000_000
        })
        .unwrap_or(0)
}
