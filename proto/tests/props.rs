//! Property tests: `decode(encode(x)) == x` for every type, and no decoder panics on any
//! input (random bytes, truncated and corrupted valid encodings).

use dlm_proto::LockspaceName;
use dlm_proto::kernel::{
    ControlRequest, PlockFlags, PlockInfo, PlockOp, PlockVersion, Uevent, UeventAction,
};
use dlm_proto::query::{
    DlmcChange, DlmcHeader, DlmcLockspace, DlmcNode, FailReason, LockspaceFlags, NodeFlags,
    NodesKind, Request, RunCheckFlags, RunStartFlags, StateRecord, StateType, WaitCondition,
};
use dlm_proto::wire::{
    Body, Change, DlmHeader, FenceFlags, FenceResult, HeaderFlags, Incarnation, Message, MsgType,
    PlockData, PlocksData, PlocksDataWriter, Protocol, ProtocolVersion, ResourceData, RunInfo,
    RunReply, RunRequest, Version3, encode_plock_msg,
};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = LockspaceName> {
    proptest::collection::vec(
        prop_oneof![b'a'..=b'z', b'0'..=b'9', Just(b':'), Just(b'-')],
        1..=64,
    )
    .prop_map(|v| LockspaceName::new(&v).expect("valid by construction"))
}

fn plock_info() -> impl Strategy<Value = PlockInfo> {
    (
        (
            any::<[u32; 2]>(),
            any::<u8>(),
            any::<bool>(),
            any::<bool>(),
            any::<u8>(),
        ),
        (
            any::<u32>(),
            any::<i32>(),
            any::<i32>(),
            any::<u32>(),
            any::<u64>(),
        ),
        (any::<u64>(), any::<u64>(), any::<u64>()),
    )
        .prop_map(
            |((v, op, ex, wait, flags), (pid, nodeid, rv, fsid, number), (a, b, owner))| {
                PlockInfo {
                    version: PlockVersion([1, v[0], v[1]]),
                    op: PlockOp(op),
                    ex,
                    wait,
                    flags: PlockFlags(flags),
                    pid,
                    nodeid,
                    rv,
                    fsid,
                    number,
                    start: a.min(b),
                    end: a.max(b),
                    owner,
                }
            },
        )
}

fn header(t: MsgType) -> impl Strategy<Value = DlmHeader> {
    (any::<[u16; 3]>(), any::<[u32; 6]>()).prop_map(move |(v, f)| DlmHeader {
        version: Version3(v),
        msg_type: t,
        nodeid: f[0],
        to_nodeid: f[1],
        global_id: f[2],
        flags: HeaderFlags(f[3]),
        msgdata: f[4],
        msgdata2: f[5],
    })
}

fn nonzero3() -> impl Strategy<Value = Version3> {
    any::<[u16; 3]>().prop_map(|v| Version3(v.map(|x| x.max(1))))
}

fn protocol() -> impl Strategy<Value = Protocol> {
    (
        nonzero3(),
        nonzero3(),
        any::<[u16; 4]>(),
        proptest::option::of((nonzero3(), nonzero3())),
    )
        .prop_map(|(dm, km, fl, run)| {
            let pv = |version, flags| ProtocolVersion { version, flags };
            let (dr, kr) = run.unwrap_or_default();
            Protocol {
                daemon_max: pv(dm, fl[0]),
                kernel_max: pv(km, fl[1]),
                daemon_run: pv(dr, fl[2]),
                kernel_run: pv(kr, fl[3]),
            }
        })
}

fn change() -> impl Strategy<Value = Change> {
    (
        any::<u32>(),
        any::<[i32; 4]>(),
        proptest::collection::vec(any::<(i32, u32, u32)>(), 0..=128),
        any::<bool>(),
    )
        .prop_map(|(started_count, c, ids, ours)| Change {
            started_count,
            member_count: c[0],
            joined_count: c[1],
            remove_count: c[2],
            failed_count: c[3],
            members: ids.iter().map(|i| i.0).collect(),
            // with an incarnation for every member (ours), or none (C's 4-byte entries)
            incarnations: if ours && !ids.is_empty() {
                ids.iter()
                    .map(|i| Incarnation {
                        pid: i.1,
                        nonce: i.2,
                    })
                    .collect()
            } else {
                Vec::new()
            },
        })
}

fn plock_data() -> impl Strategy<Value = PlockData> {
    (
        any::<[u64; 3]>(),
        any::<u32>(),
        any::<u32>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(r, pid, nodeid, ex, waiter)| PlockData {
            start: r[0].min(r[1]),
            end: r[0].max(r[1]),
            owner: r[2],
            pid,
            nodeid,
            ex,
            waiter,
        })
}

fn c_text(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(1u8..=255, 0..=max)
}

fn body() -> impl Strategy<Value = (MsgType, Vec<u8>)> {
    prop_oneof![
        (header(MsgType::START), change()).prop_map(|(h, c)| (MsgType::START, c.encode(&h))),
        (header(MsgType::PLOCKS_DONE), change())
            .prop_map(|(h, c)| (MsgType::PLOCKS_DONE, c.encode(&h))),
        (header(MsgType::PLOCK), plock_info())
            .prop_map(|(h, p)| (MsgType::PLOCK, encode_plock_msg(&h, &p).to_vec())),
        (any::<u32>(), protocol()).prop_map(|(n, p)| (MsgType::PROTOCOL, p.encode(n).to_vec())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn kernel_plock_info_round_trip(p in plock_info()) {
        prop_assert_eq!(PlockInfo::decode(&p.encode()), Ok(p));
    }

    #[test]
    fn wire_plock_round_trip(p in plock_info(), op in 3u16..=7, h in header(MsgType::PLOCK)) {
        let h = DlmHeader { msg_type: MsgType(op), ..h };
        let bytes = encode_plock_msg(&h, &p);
        let m = Message::decode(&bytes).expect("decodes");
        prop_assert_eq!(m.header, h);
        let got = match m.body {
            Body::Plock(x) | Body::PlockOwn(x) | Body::PlockDrop(x) | Body::PlockSyncLock(x)
            | Body::PlockSyncWaiter(x) => x,
            other => return Err(TestCaseError::fail(format!("wrong body {other:?}"))),
        };
        prop_assert_eq!(got, p);
        prop_assert_eq!(Message::decode(&bytes).and_then(|m| m.encode()), Ok(bytes.to_vec()));
    }

    #[test]
    fn protocol_round_trip(p in protocol(), n in any::<u32>()) {
        let bytes = p.encode(n);
        let m = Message::decode(&bytes).expect("decodes");
        prop_assert_eq!(m.body, Body::Protocol(p));
        prop_assert_eq!(m.header.nodeid, n);
    }

    #[test]
    fn change_round_trip(c in change(), h in header(MsgType::START), done in any::<bool>()) {
        let t = if done { MsgType::PLOCKS_DONE } else { MsgType::START };
        let h = DlmHeader { msg_type: t, ..h };
        let bytes = c.encode(&h);
        let m = Message::decode(&bytes).expect("decodes");
        prop_assert_eq!(m.header, h);
        let want = if done { Body::PlocksDone(c) } else { Body::Start(c) };
        prop_assert_eq!(m.body, want);
    }

    #[test]
    fn plocks_data_round_trip(
        h in header(MsgType::PLOCKS_DATA),
        number in any::<u64>(), owner in any::<i32>(), cont in any::<bool>(),
        entries in proptest::collection::vec(plock_data(), 0..=24),
    ) {
        let r = ResourceData { number, owner, flags: u32::from(cont) };
        let mut w = PlocksDataWriter::new(&h, r);
        for e in &entries {
            prop_assert!(w.push(*e));
        }
        prop_assert_eq!(w.is_full(), entries.len() == 24);
        prop_assert!(w.as_bytes().len() <= 1024);
        let m = Message::decode(w.as_bytes()).expect("decodes");
        let Body::PlocksData(d) = m.body else { return Err(TestCaseError::fail("body")) };
        prop_assert_eq!(d.resource, r);
        prop_assert_eq!(d.entries().collect::<Vec<_>>(), entries);
    }

    #[test]
    fn fence_round_trip(f in any::<(u32, u32, i32, u64)>(), n in any::<u32>(), clear in any::<bool>()) {
        let fr = FenceResult { flags: FenceFlags(f.0), nodeid: f.1, result: f.2, fence_walltime: f.3 };
        let t = if clear { MsgType::FENCE_CLEAR } else { MsgType::FENCE_RESULT };
        let bytes = fr.encode(t, n);
        let m = Message::decode(&bytes).expect("decodes");
        prop_assert_eq!(m.body, if clear { Body::FenceClear(fr) } else { Body::FenceResult(fr) });
    }

    #[test]
    fn run_round_trip(
        info in any::<([i32; 7], u32)>(), uuid in c_text(64), command in c_text(1024),
        h in header(MsgType::RUN_REQUEST),
    ) {
        let (i, flags) = info;
        let info = RunInfo {
            dest_nodeid: i[0], start_nodeid: i[1], local_pid: i[2], local_result: i[3],
            need_replies: i[4], reply_count: i[5], fail_count: i[6], flags,
        };
        let req = RunRequest { info, uuid: &uuid, command: &command };
        let bytes = req.encode(&h).expect("fits");
        prop_assert_eq!(Message::decode(&bytes).expect("decodes").body, Body::RunRequest(req));
        let rep = RunReply { info, uuid: &uuid };
        let h = DlmHeader { msg_type: MsgType::RUN_REPLY, ..h };
        let bytes = rep.encode(&h).expect("fits");
        prop_assert_eq!(Message::decode(&bytes).expect("decodes").body, Body::RunReply(rep));
    }

    #[test]
    fn control_round_trip(n in name(), flags in any::<u32>(), minor in any::<u32>()) {
        for req in [ControlRequest::Create { name: n, flags }, ControlRequest::Remove { minor, flags }] {
            let (buf, len) = req.encode();
            prop_assert_eq!(ControlRequest::decode(&buf[..len]), Ok(req));
        }
    }

    #[test]
    fn uevent_round_trip(n in name(), online in any::<bool>(), seqnum in proptest::option::of(any::<u64>())) {
        let action = if online { UeventAction::Online } else { UeventAction::Offline };
        let ev = Uevent { action, lockspace: n, seqnum };
        prop_assert_eq!(Uevent::parse(&ev.encode()), Ok(ev));
    }

    #[test]
    fn query_header_round_trip(f in any::<(u32, u32, u32, i32, i32)>(), raw_name in any::<[u8; 64]>()) {
        let h = DlmcHeader {
            command: dlm_proto::query::Command(f.0), option: f.1, len: f.2, data: f.3, flags: f.4,
            name: raw_name,
        };
        prop_assert_eq!(DlmcHeader::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn request_round_trip(req in request()) {
        let bytes = req.encode();
        let h = DlmcHeader::decode(&bytes).expect("header");
        prop_assert_eq!(Request::extra_len(&h), bytes.len() - 96);
        prop_assert_eq!(Request::decode(&h, &bytes[96..]), Ok(req));
    }

    #[test]
    fn lockspace_and_node_round_trip(
        n in name(), c in any::<([i32; 6], [u32; 2])>(), flags in any::<u32>(), gid in any::<u32>(),
        node in any::<(i32, u32, u32, u32, i32, u64, u64)>(),
    ) {
        let ch = DlmcChange {
            member_count: c.0[0], joined_count: c.0[1], remove_count: c.0[2], failed_count: c.0[3],
            wait_condition: match c.0[4] { 0 => WaitCondition::None, 1 => WaitCondition::Ringid,
                2 => WaitCondition::Quorum, 3 => WaitCondition::Fencing, 4 => WaitCondition::FsDone,
                x => WaitCondition::Other(x) },
            wait_messages: c.0[5] & 1 == 1, seq: c.1[0], combined_seq: c.1[1],
        };
        let ls = DlmcLockspace { cg_prev: ch, cg_next: DlmcChange::default(), flags: LockspaceFlags(flags), global_id: gid, name: n };
        prop_assert_eq!(DlmcLockspace::decode(&ls.encode()), Ok(ls));
        let nd = DlmcNode {
            nodeid: node.0, flags: NodeFlags(node.1), added_seq: node.2, removed_seq: node.3,
            fail_reason: FailReason::from_raw(node.4), fail_walltime: node.5, fail_monotime: node.6,
        };
        prop_assert_eq!(DlmcNode::decode(&nd.encode()), Ok(nd));
    }

    #[test]
    fn state_round_trip(kind in 0u8..4, nodeid in any::<i32>(), text in c_text(4095)) {
        let kind = [StateType::Daemon, StateType::DaemonNode, StateType::StartupNode, StateType::Run][usize::from(kind)];
        let rec = StateRecord { kind, nodeid, text };
        let mut out = Vec::new();
        rec.encode_into(&mut out);
        prop_assert_eq!(StateRecord::decode(&out), Ok((rec, out.len())));
    }

    // ---- no decoder panics ----

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1300)) {
        decode_everything(&bytes);
    }

    #[test]
    fn corrupted_messages_never_panic(
        (_, good) in body(), cut in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        msg_type in 0u16..25,
    ) {
        let mut bad = good.clone();
        for (i, b) in flips {
            let at = i.index(bad.len());
            bad[at] = b;
        }
        decode_everything(&bad);
        // every type code on a valid body
        let mut retyped = good.clone();
        retyped[6..8].copy_from_slice(&msg_type.to_le_bytes());
        decode_everything(&retyped);
        // every truncation of a valid message fails cleanly
        let n = cut.index(good.len());
        let truncated = &good[..n];
        decode_everything(truncated);
        if n < 40 {
            prop_assert!(Message::decode(truncated).is_err());
        }
    }
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        Just(Request::DumpDebug),
        name().prop_map(Request::DumpPlocks),
        name().prop_map(Request::LockspaceInfo),
        (name(), any::<i32>())
            .prop_map(|(lockspace, nodeid)| Request::NodeInfo { lockspace, nodeid }),
        any::<i32>().prop_map(|max| Request::Lockspaces { max }),
        (name(), any::<u32>(), any::<i32>()).prop_map(|(lockspace, k, max)| {
            Request::LockspaceNodes {
                lockspace,
                kind: NodesKind::from_raw(k),
                max,
            }
        }),
        name().prop_map(Request::FsRegister),
        name().prop_map(Request::FsUnregister),
        (name(), any::<i32>())
            .prop_map(|(lockspace, nodeid)| Request::FsNotified { lockspace, nodeid }),
        Just(Request::DeadlockCheck),
        Just(Request::DumpLogPlock),
        (1..i32::MAX).prop_map(|nodeid| Request::FenceAck { nodeid }),
        Just(Request::DumpStatus),
        Just(Request::DumpConfig),
        (any::<i32>(), any::<u32>(), c_text(1023)).prop_map(|(dest_nodeid, f, command)| {
            Request::RunStart {
                dest_nodeid,
                flags: RunStartFlags(f),
                command,
            }
        }),
        (c_text(64), any::<u32>()).prop_map(|(uuid, f)| Request::RunCheck {
            uuid,
            flags: RunCheckFlags(f)
        }),
        Just(Request::DumpRun),
        Just(Request::ReloadConfig),
        c_text(1023).prop_map(|text| Request::SetConfig { text }),
    ]
}

/// Feeds `bytes` to every decoder; any panic fails the property.
fn decode_everything(bytes: &[u8]) {
    let _ = PlockInfo::decode(bytes);
    if let Ok(m) = Message::decode(bytes) {
        // whatever decodes re-encodes without panicking
        let _ = m.encode();
        if let Body::PlocksData(d) = &m.body {
            assert!(d.len() <= 24);
            assert_eq!(d.entries().count(), d.len());
        }
    }
    let _ = DlmHeader::decode(bytes);
    let _ = PlocksData::decode(bytes);
    let _ = Change::decode(bytes);
    let _ = Protocol::decode(bytes);
    let _ = FenceResult::decode(bytes);
    let _ = RunRequest::decode(bytes);
    let _ = RunReply::decode(bytes);
    if let Ok(h) = DlmcHeader::decode(bytes) {
        let n = Request::extra_len(&h).min(bytes.len().saturating_sub(96));
        let _ = Request::decode(&h, &bytes[96.min(bytes.len())..][..n]);
    }
    let _ = DlmcLockspace::decode(bytes);
    let _ = DlmcNode::decode(bytes);
    let _ = StateRecord::decode(bytes);
    let _ = Uevent::parse(bytes);
    let _ = ControlRequest::decode(bytes);
    let _ = LockspaceName::new(bytes);
}
