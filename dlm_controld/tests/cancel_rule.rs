//! Plock CANCEL in a lockspace with a C member: the wire cannot tell a C 4.2 daemon (keeps
//! the waiter) from a 4.3 one (removes it), so ours refuse their own CANCEL without
//! multicasting it and keep the waiter of a C member's CANCEL, unless every node of ours
//! says (`c_peers_apply_cancel=1`, START flag 0x800) that the C members apply it.
//!
//! Node 2 plays the C member: its START messages lose our flags on the way, as a C
//! daemon's never had them.

use dlm_controld::lscore::{Action, LsCore, LsEnv};
use dlm_controld::membership::NoFencing as NoFence;
use dlm_cpg::Event;
use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::wire::{DlmHeader, HeaderFlags, MsgType, global_id};

fn env(f: &NoFence) -> LsEnv<'_> {
    LsEnv::quorate_unfenced(10_000, f)
}

/// Two nodes in total order: node 1 ours, node 2 a "C" member (see the module comment).
struct Pair {
    cores: [LsCore; 2],
    replies: [Vec<PlockInfo>; 2],
    /// PLOCK messages node 1 multicast.
    sent_plocks: usize,
}

/// A C daemon's START: none of this project's flags.
fn as_c(mut payload: Vec<u8>) -> Vec<u8> {
    let Ok((h, _)) = DlmHeader::decode(&payload) else {
        return payload;
    };
    if h.msg_type == MsgType::START {
        let ours = HeaderFlags::CANCEL_AWARE
            | HeaderFlags::NATIVE2
            | HeaderFlags::NATIVE_SYNC
            | HeaderFlags::DEADLOCK_AWARE
            | HeaderFlags::C_PEERS_CANCEL;
        let h = DlmHeader {
            flags: HeaderFlags(h.flags.0 & !ours),
            ..h
        };
        payload[..h.encode().len()].copy_from_slice(&h.encode());
    }
    payload
}

impl Pair {
    fn new(c_peers_cancel: bool) -> Self {
        let name = || LockspaceName::new(b"foo").expect("name");
        let mut a = LsCore::new(name(), 1, true, 1);
        a.set_c_peers_cancel(c_peers_cancel);
        a.set_native(false);
        let b = LsCore::new(name(), 2, true, 2);
        let mut p = Self {
            cores: [a, b],
            replies: [Vec::new(), Vec::new()],
            sent_plocks: 0,
        };
        let m = |nodeid| dlm_cpg::Member {
            nodeid,
            pid: 1,
            reason: dlm_cpg::Reason::from_raw(1),
        };
        // one confchg everywhere, then what it made each send
        let outs: Vec<Vec<Action>> = (0..2)
            .map(|k| {
                let ev = Event::ConfChg {
                    members: vec![m(1), m(2)],
                    left: vec![],
                    joined: vec![m(1), m(2)],
                };
                p.cores[k].event(&env(&NoFence), ev)
            })
            .collect();
        for (k, out) in outs.into_iter().enumerate() {
            p.route(k, out);
        }
        assert!(!p.cores[0].kernel_stopped() && !p.cores[1].kernel_stopped());
        p
    }

    /// What node `k` did: replies kept, sends delivered to both in order (recursively
    /// through a queue, never by recursion).
    fn route(&mut self, k: usize, out: Vec<Action>) {
        let mut queue = std::collections::VecDeque::from([(k, out)]);
        while let Some((k, out)) = queue.pop_front() {
            for a in out {
                match a {
                    Action::Reply(r) => self.replies[k].push(r),
                    Action::Send(payload) => {
                        let payload = if k == 1 { as_c(payload) } else { payload };
                        if k == 0
                            && DlmHeader::decode(&payload)
                                .is_ok_and(|(h, _)| h.msg_type == MsgType::PLOCK)
                        {
                            self.sent_plocks += 1;
                        }
                        for to in 0..2 {
                            let ev = Event::Deliver {
                                nodeid: u32::try_from(k + 1).expect("node"),
                                pid: 1,
                                payload: payload.clone(),
                            };
                            let more = self.cores[to].event(&env(&NoFence), ev);
                            queue.push_back((to, more));
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    fn request(&mut self, k: usize, info: PlockInfo) {
        let mut out = Vec::new();
        self.cores[k].request(10_000, &info, &mut out);
        self.route(k, out);
    }

    fn waiters(&self, k: usize) -> usize {
        self.cores[k].plocks().waiter_count()
    }
}

fn req(node: i32, op: PlockOp, wait: bool, owner: u64) -> PlockInfo {
    let name = LockspaceName::new(b"foo").expect("name");
    PlockInfo {
        version: PLOCK_VERSION,
        op,
        ex: true,
        wait,
        flags: PlockFlags(0),
        pid: u32::try_from(owner).expect("pid"),
        nodeid: node,
        rv: 0,
        fsid: global_id(&name),
        number: 7,
        start: 0,
        end: 9,
        owner,
    }
}

/// Node `waiter` waits behind node `holder`'s lock on both replicas.
fn one_waiting(p: &mut Pair, holder: usize, waiter: usize) {
    let node = |k: usize| i32::try_from(k + 1).expect("node");
    p.request(holder, req(node(holder), PlockOp::LOCK, false, 100));
    p.request(waiter, req(node(waiter), PlockOp::LOCK, true, 200));
    assert_eq!(
        (p.waiters(0), p.waiters(1)),
        (1, 1),
        "one waiter everywhere"
    );
}

#[test]
fn our_cancel_is_refused_here_and_never_multicast_beside_an_unknown_c_member() {
    let mut p = Pair::new(false);
    one_waiting(&mut p, 1, 0);
    let before = p.sent_plocks;
    p.replies[0].clear();
    p.request(0, req(1, PlockOp::CANCEL, false, 200));
    assert_eq!(p.sent_plocks, before, "the CANCEL stayed on node 1");
    let r = p.replies[0].pop().expect("a reply");
    assert_eq!((r.op, r.rv), (PlockOp::CANCEL, -22));
    assert_eq!(
        (p.waiters(0), p.waiters(1)),
        (1, 1),
        "the waiter stays everywhere"
    );
}

#[test]
fn a_c_members_cancel_keeps_the_waiter_unless_told_c_applies_it() {
    for told in [false, true] {
        let mut p = Pair::new(told);
        one_waiting(&mut p, 0, 1);
        // node 2 multicasts its CANCEL, as both C 4.2 and C 4.3 do; its own core plays
        // no part in what node 1 decides
        let cancel = req(2, PlockOp::CANCEL, false, 200);
        let msg = dlm_proto::wire::encode_plock_msg(
            &DlmHeader {
                global_id: cancel.fsid,
                ..DlmHeader::new(dlm_proto::wire::DAEMON_PROTOCOL, MsgType::PLOCK, 2)
            },
            &cancel,
        );
        let out = p.cores[0].event(
            &env(&NoFence),
            Event::Deliver {
                nodeid: 2,
                pid: 1,
                payload: msg.to_vec(),
            },
        );
        p.route(0, out);
        let want: usize = if told { 0 } else { 1 };
        assert_eq!(p.waiters(0), want, "told {told}");
        // the holder's unlock then grants node 2 the lock only where the waiter stayed
        p.request(0, req(1, PlockOp::UNLOCK, false, 100));
        assert_eq!(p.cores[0].plocks().lock_count(), want, "told {told}");
    }
}

#[test]
fn told_c_applies_cancel_ours_is_multicast_and_removes_the_waiter() {
    let mut p = Pair::new(true);
    one_waiting(&mut p, 1, 0);
    let before = p.sent_plocks;
    p.replies[0].clear();
    p.request(0, req(1, PlockOp::CANCEL, false, 200));
    assert_eq!(
        p.sent_plocks,
        before + 1,
        "the CANCEL went to every replica"
    );
    let r = p.replies[0].pop().expect("a reply");
    assert_eq!((r.op, r.rv), (PlockOp::CANCEL, 0));
    assert_eq!(p.waiters(0), 0);
    // the C member's replica, our own core under C's flags here, applies it by the same
    // rule, as a C 4.3 does
    assert_eq!(p.waiters(1), 0);
}

#[test]
fn a_cancel_multicast_by_ours_is_applied_even_when_the_rule_changed_since() {
    // as if node 1 had multicast it while its lockspace had only members of ours
    let mut p = Pair::new(false);
    one_waiting(&mut p, 1, 0);
    let cancel = req(1, PlockOp::CANCEL, false, 200);
    let msg = dlm_proto::wire::encode_plock_msg(
        &DlmHeader {
            global_id: cancel.fsid,
            ..DlmHeader::new(dlm_proto::wire::DAEMON_PROTOCOL, MsgType::PLOCK, 1)
        },
        &cancel,
    );
    let out = p.cores[0].event(
        &env(&NoFence),
        Event::Deliver {
            nodeid: 1,
            pid: 1,
            payload: msg.to_vec(),
        },
    );
    p.route(0, out);
    assert_eq!(p.waiters(0), 0, "the originator removed it");
    let r = p.replies[0].pop().expect("a reply");
    assert_eq!((r.op, r.rv), (PlockOp::CANCEL, 0));
}
