//! The plock engine against C's list model (`plock/tests/model`) on three replicas: every
//! six input bytes are one step (LOCK, UNLOCK, CLOSE, GET, CANCEL of a lock sent earlier, an
//! unknown op, or a node's purge) over four inodes and small ranges; after every step each
//! node's replies and dump must be the model's and the digests equal; at the end the
//! snapshot restores to the same table.

use crate::model::Model;
use dlm_plock::Lockspace;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};

const FSID: u32 = 7;
const NODES: [u32; 3] = [1, 2, 3];

/// One input.
pub fn run(bytes: &[u8]) {
    let mut engines: Vec<Lockspace> = NODES
        .iter()
        .map(|&n| Lockspace::new(n, FSID, u64::from(n) * 0x1234_5677))
        .collect();
    let mut models: Vec<Model> = NODES.iter().map(|&n| Model::new(n as i32, FSID)).collect();
    let mut sent: Vec<PlockInfo> = Vec::new();
    for (t, s) in bytes.chunks_exact(6).enumerate() {
        let now = t as u64 * 700;
        let node = NODES[usize::from(s[1] % 3)];
        let start = u64::from(s[3] % 16);
        let mut info = PlockInfo {
            version: PLOCK_VERSION,
            op: PlockOp::LOCK,
            ex: s[1] & 0x10 != 0,
            wait: s[1] & 0x20 != 0,
            flags: PlockFlags(0),
            pid: u32::from(s[5] % 4),
            nodeid: node as i32,
            rv: 0,
            fsid: FSID,
            number: u64::from(s[2] % 4),
            start,
            end: start + u64::from(s[4] % 8),
            owner: u64::from((s[2] >> 2) % 4),
        };
        let msg = match s[0] % 8 {
            0 | 1 => Some(info),
            2 => Some(PlockInfo {
                op: PlockOp::UNLOCK,
                ..info
            }),
            3 => Some(PlockInfo {
                op: PlockOp::GET,
                ..info
            }),
            4 if !sent.is_empty() => {
                let w = sent[usize::from(s[5]) % sent.len()];
                Some(PlockInfo {
                    op: PlockOp::CANCEL,
                    wait: false,
                    ..w
                })
            }
            5 => None,
            6 => {
                info.flags = PlockFlags(1);
                Some(PlockInfo {
                    op: PlockOp::UNLOCK,
                    ..info
                })
            }
            7 => Some(PlockInfo {
                op: PlockOp(9),
                ..info
            }),
            _ => continue,
        };
        if let Some(m) = msg {
            if m.op == PlockOp::LOCK && m.wait {
                sent.push(m);
            }
        }
        for (e, m) in engines.iter_mut().zip(models.iter_mut()) {
            let mut got = Vec::new();
            let mut want = Vec::new();
            match msg {
                Some(msg) => {
                    e.apply(now, msg.nodeid as u32, &msg, &mut got)
                        .expect("valid sender");
                    m.apply(&msg, &mut want);
                }
                None => {
                    e.purge_node(now, node, &mut got);
                    m.purge(node as i32, &mut want);
                }
            }
            let got: Vec<PlockInfo> = got.into_iter().map(|r| r.info).collect();
            assert_eq!(got, want, "replies of node {} at step {t}", m.our);
            assert_eq!(
                e.dump_text(),
                m.dump(),
                "dump of node {} at step {t}",
                m.our
            );
        }
        let d = engines[0].digest();
        assert!(
            engines.iter().all(|e| e.digest() == d),
            "digests at step {t}"
        );
    }
    let mut joiner = Lockspace::new(4, FSID, 0xfeed);
    for ch in engines[0].snapshot() {
        joiner
            .restore(1, ch.resource, ch.entries())
            .expect("own snapshot restores");
    }
    assert_eq!(joiner.digest(), engines[0].digest());
    assert_eq!(joiner.dump_text(), engines[0].dump_text());
}
