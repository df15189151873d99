//! Bad CPG input reaches a lockspace's core: each malformed or foreign message becomes one
//! `Action::Dropped` naming why (the task logs and counts it), and nothing else happens.

use dlm_controld::lscore::{Action, LsCore, LsEnv};
use dlm_controld::membership::NoFencing as NoFence;
use dlm_cpg::Event;
use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::wire::{DlmHeader, MsgType, Version3, encode_plock_msg, global_id};

/// The quorate, unfenced world every input of these tests meets.
fn env(f: &NoFence) -> LsEnv<'_> {
    LsEnv::quorate_unfenced(10_000, f)
}

fn deliver(core: &mut LsCore, from: u32, payload: Vec<u8>) -> Vec<Action> {
    core.event(
        &env(&NoFence),
        Event::Deliver {
            nodeid: from,
            pid: 1,
            payload,
        },
    )
}

fn dropped(actions: &[Action]) -> Option<(u32, &str)> {
    match actions {
        [Action::Dropped { from, why }] => Some((*from, why.as_str())),
        _ => None,
    }
}

/// A core of node 1 that has started as the lockspace's only member (it has the table, so
/// a delivered PLOCK is applied, not ignored as a fresh joiner ignores it).
fn started(name: LockspaceName) -> LsCore {
    let mut core = LsCore::new(name, 1, true, 0x5eed);
    let us = dlm_cpg::Member {
        nodeid: 1,
        pid: 1,
        reason: dlm_cpg::Reason::from_raw(1),
    };
    let sent = core.event(
        &env(&NoFence),
        Event::ConfChg {
            members: vec![us],
            left: vec![],
            joined: vec![us],
        },
    );
    for a in sent {
        if let Action::Send(payload) = a {
            deliver(&mut core, 1, payload);
        }
    }
    assert!(!core.kernel_stopped(), "the lockspace started");
    core
}

#[test]
fn malformed_and_foreign_messages_are_dropped_with_a_reason() {
    let name = LockspaceName::new(b"foo").expect("name");
    let gid = global_id(&name);
    let mut core = started(name);
    let info = PlockInfo {
        version: PLOCK_VERSION,
        op: PlockOp::LOCK,
        ex: true,
        wait: false,
        flags: PlockFlags(0),
        pid: 5,
        nodeid: 1,
        rv: 0,
        fsid: gid,
        number: 9,
        start: 0,
        end: 9,
        owner: 5,
    };
    let header = |version, sender| DlmHeader {
        global_id: gid,
        ..DlmHeader::new(Version3(version), MsgType::PLOCK, sender)
    };

    let a = deliver(&mut core, 1, vec![1, 2, 3]);
    let (from, why) = dropped(&a).expect("garbage dropped");
    assert_eq!(from, 1);
    assert!(!why.is_empty());

    let msg = encode_plock_msg(&header([3, 1, 1], 3), &info).to_vec();
    let a = deliver(&mut core, 1, msg);
    let (_, why) = dropped(&a).expect("wrong sender dropped");
    assert!(why.contains("node 3"), "{why}");

    let msg = encode_plock_msg(&header([2, 0, 0], 1), &info).to_vec();
    let a = deliver(&mut core, 1, msg);
    let (_, why) = dropped(&a).expect("old protocol dropped");
    assert!(why.contains("not 3.1"), "{why}");

    let mut truncated = encode_plock_msg(&header([3, 1, 1], 1), &info).to_vec();
    truncated.truncate(50);
    assert!(dropped(&deliver(&mut core, 1, truncated)).is_some());

    // a request that names another node than its sender (C logs it; it was dropped silently)
    let lie = PlockInfo { nodeid: 2, ..info };
    let a = deliver(
        &mut core,
        1,
        encode_plock_msg(&header([3, 1, 1], 1), &lie).to_vec(),
    );
    let (_, why) = dropped(&a).expect("a plock for another node dropped");
    assert!(why.contains("node 2"), "{why}");
    // none of it touched the table
    assert_eq!(core.plocks().lock_count(), 0);

    // while the same request, well formed, does: the checks above could fail
    let a = deliver(
        &mut core,
        1,
        encode_plock_msg(&header([3, 1, 1], 1), &info).to_vec(),
    );
    assert_eq!(core.plocks().lock_count(), 1);
    assert!(
        matches!(a.as_slice(), [Action::Reply(r)] if r.rv == 0),
        "{a:?}"
    );
}
