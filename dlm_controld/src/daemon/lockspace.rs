//! One lockspace's task: it owns the lockspace's group and membership machine, turns group
//! events into machine inputs and machine effects into kernel writes and messages.

use dlm_cpg::{EmbeddedGroup, Event, Group};
use dlm_proto::LockspaceName;
use dlm_proto::wire::{Body, DlmHeader, HeaderFlags, Message, MsgType, Version3, global_id};
use tokio::sync::mpsc;

use super::startup;
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

/// No fencing is configured in the embedded cluster: nothing to wait for.
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
    group: EmbeddedGroup,
    mem: Membership,
    ring: u64,
    left: bool,
}

fn monotonic_secs() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| u64::try_from(t.tv_sec()).unwrap_or(0))
        .unwrap_or(0)
}

impl Ls {
    fn env<'a>(&self, fence: &'a NoFencing) -> Env<'a> {
        Env {
            now: monotonic_secs(),
            cluster_ring_seq: self.ring,
            quorate: true,
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
        let fence = NoFencing;
        while let Some(ev) = self.group.poll_event() {
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
    seam: KernelRoot,
    our: u32,
    mut commands: mpsc::UnboundedReceiver<LsCommand>,
    done: mpsc::UnboundedSender<String>,
) {
    let text = name.to_str_lossy().into_owned();
    let mut ls = Ls {
        gid: global_id(&name),
        name,
        text: text.clone(),
        conf,
        seam,
        our,
        group: EmbeddedGroup::join(our, std::process::id(), true),
        mem: Membership::joining(our),
        ring: 0,
        left: false,
    };
    ls.drain();
    while !ls.left {
        let Some(cmd) = commands.recv().await else {
            break;
        };
        match cmd {
            LsCommand::Poll => {
                let fence = NoFencing;
                let env = ls.env(&fence);
                let fx = ls.mem.poll(&env);
                ls.perform(fx);
            }
            LsCommand::Leave => {
                ls.mem.leave();
                ls.group.leave();
            }
        }
        ls.drain();
    }
    let _ = done.send(text);
}
