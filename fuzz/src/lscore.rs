//! One lockspace's core (node 1 of nodes 1–3) driven by input bytes, eight per event:
//! membership changes and rings, our own messages delivered back, other nodes' STARTs,
//! PLOCK, PLOCKS_DATA and PLOCKS_DONE messages with fuzzed fields, kernel requests, polls
//! and raw bytes with a valid header or none (the first byte also sets `plock_locks_max`,
//! 0–3). Whatever arrives, the core must not panic, and every kernel request it answers
//! must be one it was given.

use dlm_controld::lscore::{Action, LsCore, LsEnv};
use dlm_controld::membership::NoFencing;
use dlm_cpg::{Event, Member, Reason, RingId};
use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::wire::{
    Change, DlmHeader, HeaderFlags, MsgType, NativeEntry, NativeKind, NativeWriter, PlockData,
    PlocksDataWriter, ResourceData, Version3, encode_plock_msg, global_id,
};

fn deliver(core: &mut LsCore, env: &LsEnv<'_>, from: u32, payload: Vec<u8>) -> Vec<Action> {
    core.event(
        env,
        Event::Deliver {
            nodeid: from,
            pid: from,
            payload,
        },
    )
}

fn member(nodeid: u32, reason: u32) -> Member {
    Member {
        nodeid,
        pid: nodeid,
        reason: Reason::from_raw(reason),
    }
}

/// One input.
pub fn run(bytes: &[u8]) {
    let name = LockspaceName::new(b"fz").expect("name");
    let gid = global_id(&name);
    let mut core = LsCore::new(name, 1, true, 0x5eed);
    // `plock_locks_max` from none to 3, so its refusals meet everything else
    core.set_locks_max(usize::from(bytes.first().copied().unwrap_or(0) % 4));
    let fence = NoFencing;
    let mut members: Vec<u32> = Vec::new();
    let mut ring = 0u64;
    let mut ours: std::collections::VecDeque<Vec<u8>> = Default::default();
    let mut asked: Vec<PlockInfo> = Vec::new();
    let header = |t: MsgType, from: u32, flags: u32, seq: u32| DlmHeader {
        global_id: gid,
        flags: HeaderFlags(flags),
        msgdata: seq,
        ..DlmHeader::new(Version3([3, 1, 1]), t, from)
    };
    for (t, r) in bytes.chunks_exact(8).enumerate() {
        let env = LsEnv {
            now: t as u64,
            now_ms: t as u64 * 100,
            quorate: r[7] & 0x80 == 0,
            cluster_ring_seq: ring,
            quorum_required: true,
            fencing_enabled: r[7] & 0x40 != 0,
            fencing: &fence,
        };
        let other = 2 + u32::from(r[1] & 1);
        let info = |nodeid: u32| {
            let start = u64::from(r[3] % 16);
            PlockInfo {
                version: PLOCK_VERSION,
                op: PlockOp(1 + r[2] % 5),
                ex: r[2] & 0x10 != 0,
                wait: r[2] & 0x20 != 0,
                flags: PlockFlags(r[2] >> 7),
                pid: u32::from(r[5]),
                nodeid: nodeid as i32,
                rv: 0,
                fsid: gid,
                number: u64::from(r[4] % 4),
                start,
                end: start + u64::from(r[6] % 8),
                owner: u64::from(r[5] % 3),
            }
        };
        let actions = match r[0] % 12 {
            0 => {
                // a membership change: node 1 always, nodes 2 and 3 by the mask
                let next: Vec<u32> = [1, 2, 3]
                    .into_iter()
                    .filter(|&n| n == 1 || r[1] & (1 << n) != 0)
                    .collect();
                let joined: Vec<Member> = next
                    .iter()
                    .filter(|n| !members.contains(n))
                    .map(|&n| member(n, 1))
                    .collect();
                let left: Vec<Member> = members
                    .iter()
                    .filter(|n| !next.contains(n))
                    .map(|&n| member(n, u32::from(r[2] % 6)))
                    .collect();
                members = next;
                core.event(
                    &env,
                    Event::ConfChg {
                        members: members.iter().map(|&n| member(n, 0)).collect(),
                        left,
                        joined,
                    },
                )
            }
            1 => {
                ring += 1 + u64::from(r[1] % 2);
                core.event(
                    &env,
                    Event::Totem {
                        ring: RingId {
                            nodeid: 1,
                            seq: ring,
                        },
                        members: members.clone(),
                    },
                )
            }
            2 => match ours.pop_front() {
                Some(payload) => deliver(&mut core, &env, 1, payload),
                None => Vec::new(),
            },
            3 => {
                let body = Change {
                    started_count: u32::from(r[3] % 3),
                    member_count: members.len() as i32,
                    joined_count: i32::from(r[4] % 3),
                    remove_count: i32::from(r[5] % 3),
                    failed_count: i32::from(r[6] % 2),
                    members: members.iter().map(|&n| n as i32).collect(),
                    incarnations: Vec::new(),
                };
                // native mode too, when the other member offers it (and SYNC, or not)
                let native = match (r[2] & 0x8 != 0, r[5] & 0x40 != 0) {
                    (true, true) => HeaderFlags::NATIVE2 | HeaderFlags::NATIVE_SYNC,
                    (true, false) => HeaderFlags::NATIVE2,
                    (false, _) => 0,
                };
                let flags = u32::from(r[2] & 0x7) | HeaderFlags::CANCEL_AWARE | native;
                let payload = body.encode(&header(
                    MsgType::START,
                    other,
                    flags,
                    u32::from(r[1] >> 1) % 4,
                ));
                deliver(&mut core, &env, other, payload)
            }
            4 => {
                let payload =
                    encode_plock_msg(&header(MsgType::PLOCK, other, 0, 0), &info(other)).to_vec();
                deliver(&mut core, &env, other, payload)
            }
            5 => {
                let i = info(1);
                asked.push(i);
                let mut a = Vec::new();
                core.request(0, &i, &mut a);
                a
            }
            6 => {
                let rd = ResourceData {
                    number: u64::from(r[4] % 4),
                    owner: 0,
                    flags: u32::from(r[1] >> 7),
                };
                let mut w = PlocksDataWriter::new(
                    &header(MsgType::PLOCKS_DATA, other, 0, u32::from(r[6] % 4)),
                    rd,
                );
                for k in 0..r[3] % 4 {
                    let start = (u64::from(r[5]) + u64::from(k)) % 16;
                    w.push(PlockData {
                        start,
                        end: start + u64::from(k),
                        owner: u64::from(k % 2),
                        pid: 9,
                        // not node 1: a joiner holds nothing of its own
                        nodeid: [0, 2, 3][usize::from(r[2] % 3)],
                        ex: r[2] & 0x10 != 0,
                        waiter: k == 2,
                    });
                }
                let payload = w.as_bytes().to_vec();
                deliver(&mut core, &env, other, payload)
            }
            7 => {
                let done = Change {
                    started_count: 1,
                    member_count: members.len() as i32,
                    joined_count: 1,
                    remove_count: 0,
                    failed_count: 0,
                    members: members.iter().map(|&n| n as i32).collect(),
                    incarnations: Vec::new(),
                };
                let mut h = header(
                    MsgType::PLOCKS_DONE,
                    other,
                    HeaderFlags::HAVEPLOCK,
                    u32::from(r[6] % 4),
                );
                h.msgdata2 = u32::from(r[3] % 4);
                let payload = done.encode(&h);
                deliver(&mut core, &env, other, payload)
            }
            8 => core.poll(&env),
            11 => {
                // a plock dump asked for on our node
                let mut out = Vec::new();
                let _ = core.want_fresh(env.now_ms, &mut out);
                out
            }
            9 => {
                // a NATIVE batch of the other member: requests (claims), a RELEASE, a STATE
                // with its HELD entries, a SYNC or a SYNCED (to us or not), as its owner
                // would send them or not
                let mut w = NativeWriter::new(header(MsgType::NATIVE, other, 0, 0));
                let i = info(other);
                let kind = match r[6] % 5 {
                    0 => NativeKind::Request {
                        claim: r[6] & 0x10 != 0,
                    },
                    1 => NativeKind::Release,
                    2 => NativeKind::State {
                        held: u16::from(r[3] % 3),
                    },
                    3 => NativeKind::Sync,
                    _ => NativeKind::Synced,
                };
                w.push(&NativeEntry { kind, info: i });
                if let NativeKind::State { held } = kind {
                    for k in 0..held {
                        let start = u64::from(k) * 4;
                        let held_info = PlockInfo {
                            start,
                            end: start + 1,
                            wait: k == 1,
                            ..i
                        };
                        w.push(&NativeEntry {
                            kind: NativeKind::Held {
                                candidate: r[5] & 1 != 0,
                            },
                            info: held_info,
                        });
                    }
                }
                match w.finish() {
                    Some(payload) => deliver(&mut core, &env, other, payload),
                    None => Vec::new(),
                }
            }
            _ => {
                // raw bytes, behind a valid header half the time
                let mut payload = Vec::new();
                if r[1] & 1 == 0 {
                    payload.extend_from_slice(
                        &header(MsgType(u16::from(r[2] % 20)), other, 0, 0).encode(),
                    );
                }
                payload.extend_from_slice(&r[3..]);
                deliver(&mut core, &env, other, payload)
            }
        };
        for a in actions {
            match a {
                Action::Send(bytes) => ours.push_back(bytes),
                Action::Reply(rep) => assert!(
                    asked
                        .iter()
                        .any(|q| q.number == rep.number && q.owner == rep.owner && q.op == rep.op),
                    "a reply to a request never made: {rep:?}"
                ),
                _ => {}
            }
        }
        // the shell's end of turn: the batch goes out, and now and then our STATEs
        let out = match (core.batch_urgent(), r[7] & 0x20 != 0) {
            (_, true) => core.sync(env.now_ms),
            (true, false) => core.flush(),
            (false, false) => Vec::new(),
        };
        for a in out {
            if let Action::Send(bytes) = a {
                ours.push_back(bytes);
            }
        }
        // a state transfer going out is handed over in portions
        if core.sending() {
            for a in core.pump(&env, 64) {
                if let Action::Send(bytes) = a {
                    ours.push_back(bytes);
                }
            }
        }
    }
}
