//! One lockspace's task: it owns the lockspace's group and membership machine, turns group
//! events into machine inputs and machine effects into kernel writes and messages.

use dlm_cpg::Event;
use dlm_proto::LockspaceName;
use dlm_proto::wire::{
    Body, DlmHeader, HeaderFlags, Message, MsgType, Version3, global_id, lockspace_group_name,
};
use tokio::sync::mpsc;

use super::cluster::LsGroup;
use super::{LsContext, monotonic_secs, startup};
use crate::config::LockspaceConf;
use crate::kernel::KernelRoot;
use crate::membership::{Effect, Env, FenceView, Membership};

/// What the main task tells a lockspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LsCommand {
    /// Retry a waiting change (once a second).
    Poll,
    /// The kernel released the lockspace (`offline@`).
    Leave,
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
                Effect::Started { .. } => {
                    // no plock path yet: alone, we are the data node
                    self.mem.plocks_ready();
                    Ok(())
                }
                Effect::Left => {
                    self.left = true;
                    startup::set_members(&self.seam, &self.text, &[], &[], |_| 0)
                        .and_then(|()| self.seam.sysfs_write(&self.name, "event_done", "0"))
                }
                Effect::PurgePlocks(_) | Effect::KickNode(_) => Ok(()),
            };
            if let Err(e) = r {
                eprintln!("dlm_controld: {}: {e}", self.text);
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
                    let env = Env {
                        cluster_ring_seq: ring.seq,
                        ..env
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
                    Ok(Message {
                        header,
                        body: Body::Start(c),
                    }) if header.nodeid == nodeid => {
                        self.mem
                            .handle_start(&env, nodeid, header.flags.0, header.msgdata, &c)
                    }
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
        ctx: ctx.clone(),
        left: false,
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
