//! Golden bytes: what the C daemon 4.2.0 and dlm_tool 4.2.0 were observed to send
//! (daemon-spec §3, §5) and what the kernel headers fix. Each test encodes our value and
//! compares every byte, then decodes the C bytes and compares the value.

use dlm_proto::LockspaceName;
use dlm_proto::kernel::{ControlRequest, PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::query::{
    Command, DlmcHeader, NodesKind, Request, RunStartFlags, StateRecord, StateType,
};
use dlm_proto::wire::{
    Body, Change, DlmHeader, FenceFlags, FenceResult, HeaderFlags, Incarnation, Message, MsgType,
    Protocol, ProtocolVersion, RunInfo, RunRequest, Version3, encode_plock_msg, global_id,
};
use hex_literal::hex;

fn foo() -> LockspaceName {
    LockspaceName::new(b"foo").expect("valid")
}

/// The C daemon's PROTOCOL on its own join, nodeid 1, before negotiation.
const PROTOCOL_JOIN: [u8; 72] = hex!(
    "00000000 00000100 01000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"
    "03000100 01000000 01000100 01000000 00000000 00000000 00000000 00000000"
);

#[test]
fn protocol_on_join() {
    let v = |a, b, c| ProtocolVersion {
        version: Version3([a, b, c]),
        flags: 0,
    };
    let p = Protocol {
        daemon_max: v(3, 1, 1),
        kernel_max: v(1, 1, 1),
        ..Protocol::default()
    };
    assert_eq!(p.encode(1), PROTOCOL_JOIN);
    let m = Message::decode(&PROTOCOL_JOIN).expect("decodes");
    assert_eq!(m.header.msg_type, MsgType::PROTOCOL);
    assert_eq!(m.header.nodeid, 1);
    assert_eq!(m.header.version, Version3([0, 0, 0]));
    assert_eq!(m.body, Body::Protocol(p));
}

#[test]
fn protocol_negotiated_and_stateful() {
    // The proposal and the announcement carry run = 3.1.1 / 1.1.1; a daemon that has
    // started a lockspace sets PV_STATEFUL in the daemon_run flags word.
    let mut bytes = PROTOCOL_JOIN;
    bytes[56..72].copy_from_slice(&hex!("03000100 01000100 01000100 01000000"));
    let Body::Protocol(p) = Message::decode(&bytes).expect("decodes").body else {
        panic!("not a protocol message");
    };
    assert_eq!(p.daemon_run.version, Version3([3, 1, 1]));
    assert_eq!(p.daemon_run.flags, ProtocolVersion::STATEFUL);
    assert_eq!(p.kernel_run.version, Version3([1, 1, 1]));
    assert_eq!(p.encode(1), bytes);
}

/// START for change 2 of `foo`, two members both nodeid 1, HAVEPLOCK (observed, 80 bytes).
const START_FOO_2: [u8; 80] = hex!(
    "03000100 01000200 01000000 00000000 9d33e26c 02000000 02000000 00000000 00000000 00000000"
    "20000000 04000000 02000000 01000000 02000000 01000000 00000000 00000000"
    "01000000 01000000"
);

/// The same START from a daemon of ours: 12-byte entries, each member's CPG process id
/// and nonce after its nodeid (4321 with nonce 0xabcdef01, 8765 with none known); C steps
/// through entries by `id_info_size` and reads the nodeids only.
const START_FOO_2_OURS: [u8; 96] = hex!(
    "03000100 01000200 01000000 00000000 9d33e26c 02000000 02000000 00000000 00000000 00000000"
    "20000000 0c000000 02000000 01000000 02000000 01000000 00000000 00000000"
    "01000000 e1100000 01efcdab 01000000 3d220000 00000000"
);

/// The header and change of the observed START, with `incarnations`.
fn start_foo_2(incarnations: Vec<Incarnation>) -> (DlmHeader, Change) {
    let header = DlmHeader {
        global_id: global_id(&foo()),
        flags: HeaderFlags(HeaderFlags::HAVEPLOCK),
        msgdata: 2,
        ..DlmHeader::new(Version3([3, 1, 1]), MsgType::START, 1)
    };
    let change = Change {
        started_count: 1,
        member_count: 2,
        joined_count: 1,
        remove_count: 0,
        failed_count: 0,
        members: vec![1, 1],
        incarnations,
    };
    (header, change)
}

#[test]
fn start_with_incarnations() {
    let first = Incarnation {
        pid: 4321,
        nonce: 0xabcd_ef01,
    };
    let second = Incarnation {
        pid: 8765,
        nonce: 0,
    };
    let (header, change) = start_foo_2(vec![first, second]);
    assert_eq!(change.encode(&header), START_FOO_2_OURS);
    let m = Message::decode(&START_FOO_2_OURS).expect("decodes");
    assert_eq!(m.body, Body::Start(change));
    // an incarnation short of a member sends C's form
    let (header, partial) = start_foo_2(vec![first]);
    assert_eq!(partial.encode(&header), START_FOO_2);
}

#[test]
fn start_observed() {
    let (header, change) = start_foo_2(Vec::new());
    assert_eq!(change.encode(&header), START_FOO_2);
    let m = Message::decode(&START_FOO_2).expect("decodes");
    assert_eq!(m.header, header);
    assert_eq!(m.body, Body::Start(change));
}

#[test]
fn fence_result_observed() {
    // "... 02000000 00000000 18b10c6b 00000000 ...": nodeid 2, result 0, walltime.
    let ok = FenceResult {
        flags: FenceFlags(0),
        nodeid: 2,
        result: 0,
        fence_walltime: 0x6b0c_b118,
    };
    let bytes = ok.encode(MsgType::FENCE_RESULT, 1);
    assert_eq!(bytes.len(), 1064);
    assert_eq!(&bytes[..8], &hex!("00000000 00000e00"));
    assert_eq!(
        &bytes[40..64],
        &hex!("00000000 00000000 02000000 00000000 18b10c6b 00000000")
    );
    assert!(bytes[64..].iter().all(|&b| b == 0));
    // dlm_tool fence_ack 2 → result 0x83ffffff = -ECANCELED
    let ack = FenceResult { result: -125, ..ok };
    let bytes = ack.encode(MsgType::FENCE_RESULT, 1);
    assert_eq!(&bytes[52..56], &hex!("83ffffff"));
    assert_eq!(
        Message::decode(&bytes).expect("decodes").body,
        Body::FenceResult(ack)
    );
    // shorter than 1064 is refused, as C does
    assert!(Message::decode(&bytes[..1063]).is_err());
}

#[test]
fn run_request_observed() {
    // dlm_tool run lvm lvs: flags NODE_NONE, run_info 0,1,0,0,0,0,0,1, command "lvm lvs ".
    let uuid = b"f37ccdc6-6f28-46ca-b2a2-47237aae7c61";
    let req = RunRequest {
        info: RunInfo {
            start_nodeid: 1,
            flags: 1,
            ..RunInfo::default()
        },
        uuid,
        command: b"lvm lvs ",
    };
    let header = DlmHeader::new(Version3([3, 1, 1]), MsgType::RUN_REQUEST, 1);
    let bytes = req.encode(&header).expect("fits");
    assert_eq!(bytes.len(), 1160);
    assert_eq!(
        &bytes[40..72],
        &hex!("00000000 01000000 00000000 00000000 00000000 00000000 00000000 01000000")
    );
    assert_eq!(&bytes[72..108], uuid);
    assert_eq!(&bytes[136..144], b"lvm lvs ");
    let m = Message::decode(&bytes).expect("decodes");
    assert_eq!(m.body, Body::RunRequest(req));
}

#[test]
fn plock_message_is_le_struct() {
    // PLOCK: header with daemon_run 3.1.1 then dlm_plock_info with every field LE.
    let info = PlockInfo {
        version: PLOCK_VERSION,
        op: PlockOp::LOCK,
        ex: true,
        wait: true,
        flags: PlockFlags(0),
        pid: 0x1234,
        nodeid: 1,
        rv: 0,
        fsid: 0x6ce2_339d,
        number: 0x0102_0304_0506_0708,
        start: 0,
        end: 0x7fff_ffff_ffff_ffff,
        owner: 0xffff_8881_0000_1000,
    };
    let header = DlmHeader {
        global_id: 0x6ce2_339d,
        ..DlmHeader::new(Version3([3, 1, 1]), MsgType::PLOCK, 1)
    };
    let bytes = encode_plock_msg(&header, &info);
    assert_eq!(
        bytes,
        hex!(
            "03000100 01000300 01000000 00000000 9d33e26c 00000000 00000000 00000000 00000000 00000000"
            "01000000 02000000 00000000 01010100 34120000 01000000 00000000 9d33e26c"
            "08070605 04030201 00000000 00000000 ffffffff ffffff7f 00100000 8188ffff"
        )
    );
    assert_eq!(
        Message::decode(&bytes).expect("decodes").body,
        Body::Plock(info)
    );
    // host order on the device: identical bytes on a little-endian machine
    if cfg!(target_endian = "little") {
        assert_eq!(info.encode(), bytes[40..]);
    }
}

#[test]
fn uevent_and_control_bytes() {
    let (buf, len) = ControlRequest::Create {
        name: foo(),
        flags: 0,
    }
    .encode();
    // version 6.0.2, cmd 4, is64bit 1, flags 0, minor 0, name at 24; 120 + strlen bytes
    assert_eq!(len, 123);
    assert_eq!(
        &buf[..27],
        &hex!("06000000 00000000 02000000 04010000 00000000 00000000 666f6f")
    );
    assert!(buf[27..len].iter().all(|&b| b == 0));
    let (buf, len) = ControlRequest::Remove {
        minor: 57,
        flags: 2,
    }
    .encode();
    assert_eq!(len, 120);
    assert_eq!(&buf[12..24], &hex!("05010000 02000000 39000000"));
}

/// `dlm_tool ls` as observed on the query socket.
#[test]
fn dlm_tool_ls_request() {
    let mut want =
        hex!("3cd13cd1 01000100 05000000 00000000 60000000 00000000 00000000 00000000").to_vec();
    want.resize(96, 0);
    assert_eq!(Request::Lockspaces { max: 0 }.encode(), want);
    let h = DlmcHeader::decode(&want).expect("header");
    assert_eq!(h.command, Command::LOCKSPACES);
    assert_eq!(Request::decode(&h, &[]), Ok(Request::Lockspaces { max: 0 }));
}

#[test]
fn dlm_tool_ls_nodes_request() {
    let req = Request::LockspaceNodes {
        lockspace: foo(),
        kind: NodesKind::Members,
        max: 128,
    };
    let bytes = req.encode();
    assert_eq!(
        &bytes[..32],
        &hex!("3cd13cd1 01000100 06000000 02000000 60000000 80000000 00000000 00000000")
    );
    assert_eq!(&bytes[32..36], b"foo\0");
}

#[test]
fn dlm_tool_set_config_and_run_start() {
    let text = b"log_debug=1 post_join_delay=5 ".to_vec();
    let bytes = Request::SetConfig { text: text.clone() }.encode();
    assert_eq!(bytes.len(), 1120);
    assert_eq!(&bytes[8..24], &hex!("13000000 00000000 60040000 00000000"));
    assert_eq!(&bytes[96..96 + text.len()], &text[..]);
    assert!(bytes[96 + text.len()..].iter().all(|&b| b == 0));
    let h = DlmcHeader::decode(&bytes).expect("header");
    assert_eq!(
        Request::decode(&h, &bytes[96..]),
        Ok(Request::SetConfig { text })
    );

    let run = Request::RunStart {
        dest_nodeid: 0,
        flags: RunStartFlags(RunStartFlags::NODE_NONE),
        command: b"lvm lvs ".to_vec(),
    };
    let bytes = run.encode();
    assert_eq!(
        &bytes[8..32],
        &hex!("0f000000 00000000 60040000 00000000 01000000 00000000")
    );
    assert_eq!(&bytes[96..104], b"lvm lvs ");
}

#[test]
fn status_record_observed() {
    // First DUMP_STATUS record: DAEMON, nodeid 1, str_len 0xb3 (179 = 178 chars + NUL).
    let rec = StateRecord {
        kind: StateType::Daemon,
        nodeid: 1,
        text: vec![b'x'; 178],
    };
    let mut out = Vec::new();
    rec.encode_into(&mut out);
    assert_eq!(
        &out[..28],
        &hex!("01000000 00000000 01000000 00000000 00000000 b3000000 00000000")
    );
    assert_eq!(out.len(), 28 + 179);
    assert_eq!(out.last(), Some(&0));
    assert_eq!(StateRecord::decode(&out), Ok((rec, out.len())));
}
