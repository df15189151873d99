//! The engine against the reference model: random sequences from several nodes and owners
//! over small ranges; after every step every node's replies, every dump (which lists the
//! waiters in FIFO order) and the digests must agree. Snapshot → restore keeps it all.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss
)]

mod model;

use dlm_plock::Lockspace;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use model::Model;
use proptest::prelude::*;

const NODES: [u32; 3] = [1, 2, 3];
const FSID: u32 = 0x6ce2_339d;

#[derive(Debug, Clone)]
enum Step {
    Msg(PlockInfo),
    Purge(u32),
    /// Cancel the k-th blocking lock sent so far (a real kernel only cancels what it sent).
    CancelSent(prop::sample::Index),
}

#[allow(clippy::too_many_arguments)] // one argument per request field
fn info(
    node: u32,
    owner: u64,
    ino: u64,
    op: PlockOp,
    ex: bool,
    wait: bool,
    close: bool,
    start: u64,
    len: u64,
    pid: u32,
) -> PlockInfo {
    PlockInfo {
        version: PLOCK_VERSION,
        op,
        ex,
        wait,
        flags: PlockFlags(u8::from(close)),
        pid,
        nodeid: node as i32,
        rv: 0,
        fsid: FSID,
        number: ino,
        start,
        end: start + len,
        owner,
    }
}

fn step() -> impl Strategy<Value = Step> {
    let msg = (
        0usize..3,
        1u64..4,
        1u64..3,
        0u8..100,
        any::<bool>(),
        any::<bool>(),
        0u64..12,
        0u64..6,
        1u32..5,
    )
        .prop_map(|(n, owner, ino, kind, ex, wait, start, len, pid)| {
            let node = NODES[n];
            let (op, close, wait) = match kind {
                0..=44 => (PlockOp::LOCK, false, wait),
                45..=69 => (PlockOp::UNLOCK, false, false),
                70..=76 => (PlockOp::UNLOCK, true, false),
                77..=88 => (PlockOp::GET, false, false),
                89..=97 => (PlockOp::LOCK, false, true),
                _ => (PlockOp(9), false, false),
            };
            // CLOSE unlocks the whole file, as the kernel sends it
            let (start, len) = if close {
                (0, u64::MAX - 0x8000_0000_0000_0000)
            } else {
                (start, len)
            };
            Step::Msg(info(node, owner, ino, op, ex, wait, close, start, len, pid))
        });
    prop_oneof![
        90 => msg,
        5 => any::<prop::sample::Index>().prop_map(Step::CancelSent),
        2 => (0usize..3).prop_map(|n| Step::Purge(NODES[n])),
    ]
}

struct Cluster {
    engines: Vec<Lockspace>,
    models: Vec<Model>,
    sent_blocking: Vec<PlockInfo>,
}

impl Cluster {
    /// Three replicas, with deadlock detection on or off in all of them.
    fn new(deadlock: bool) -> Self {
        let mut c = Self {
            engines: NODES
                .iter()
                .map(|&n| Lockspace::new(n, FSID, u64::from(n) * 0x1234_5677))
                .collect(),
            models: NODES.iter().map(|&n| Model::new(n as i32, FSID)).collect(),
            sent_blocking: Vec::new(),
        };
        for e in &mut c.engines {
            e.set_deadlock_detect(deadlock);
        }
        for m in &mut c.models {
            m.deadlock = deadlock;
        }
        c
    }

    fn run(&mut self, step: &Step, now: u64) -> Result<(), TestCaseError> {
        let msg = match step {
            Step::Msg(m) => Some(*m),
            Step::CancelSent(k) if !self.sent_blocking.is_empty() => {
                let lock = self.sent_blocking[k.index(self.sent_blocking.len())];
                Some(PlockInfo {
                    op: PlockOp::CANCEL,
                    wait: false,
                    ..lock
                })
            }
            Step::CancelSent(_) => None,
            Step::Purge(_) => None,
        };
        if let Some(m) = msg {
            if m.op == PlockOp::LOCK && m.wait {
                self.sent_blocking.push(m);
            }
        }
        for (e, m) in self.engines.iter_mut().zip(self.models.iter_mut()) {
            let mut got = Vec::new();
            let mut want = Vec::new();
            match (step, msg) {
                (_, Some(msg)) => {
                    let split = split_check(e, &msg, now);
                    e.apply(now, msg.nodeid as u32, &msg, &mut got)
                        .map_err(|x| TestCaseError::fail(x.to_string()))?;
                    m.apply(&msg, &mut want);
                    if let Some((splits, before)) = split {
                        let after = owner_locks(e, &msg, now);
                        prop_assert_eq!(
                            after > before,
                            splits,
                            "{:?}: {} -> {}",
                            msg,
                            before,
                            after
                        );
                        prop_assert!(after <= before + 1);
                    }
                }
                (Step::Purge(n), None) => {
                    e.purge_node(now, *n, &mut got);
                    m.purge(*n as i32, &mut want);
                }
                _ => {}
            }
            let got: Vec<PlockInfo> = got.into_iter().map(|r| r.info).collect();
            prop_assert_eq!(&got, &want, "replies of node {} after {:?}", m.our, step);
            prop_assert_eq!(
                e.dump_text(),
                m.dump(),
                "dump of node {} after {:?}",
                m.our,
                step
            );
            let ours = e
                .dump(now)
                .filter(|d| !d.waiting && d.nodeid == m.our)
                .count();
            prop_assert_eq!(e.our_lock_count(), ours, "node {} after {:?}", m.our, step);
        }
        let d0 = self.engines[0].digest();
        for e in &self.engines[1..] {
            prop_assert_eq!(e.digest(), d0);
        }
        Ok(())
    }
}

/// For an UNLOCK whose owner has no waiter on its file: whether the engine says it cuts a
/// fragment in two, and the owner's fragments there before it.
fn split_check(e: &Lockspace, msg: &PlockInfo, now: u64) -> Option<(bool, usize)> {
    let waits = e.dump(now).any(|d| {
        d.waiting && d.number == msg.number && d.nodeid == msg.nodeid && d.owner == msg.owner
    });
    (msg.op == PlockOp::UNLOCK && !waits).then(|| (e.unlock_splits(msg), owner_locks(e, msg, now)))
}

/// The granted fragments of `msg`'s owner on its file.
fn owner_locks(e: &Lockspace, msg: &PlockInfo, now: u64) -> usize {
    e.dump(now)
        .filter(|d| {
            !d.waiting && d.number == msg.number && d.nodeid == msg.nodeid && d.owner == msg.owner
        })
        .count()
}

/// 256 cases, or `DLM_MODEL_CASES` for a longer soak.
fn cases() -> u32 {
    std::env::var("DLM_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_c_model(
        steps in proptest::collection::vec(step(), 1..120),
        deadlock in any::<bool>(),
    ) {
        let mut c = Cluster::new(deadlock);
        for (t, s) in steps.iter().enumerate() {
            c.run(s, t as u64)?;
        }
        // snapshot → restore into a fresh node keeps dump and digest; the chunks are C's
        let chunks: Vec<_> = c.engines[0].snapshot().collect();
        let model_chunks = c.models[0].snapshot();
        prop_assert_eq!(chunks.len(), model_chunks.len());
        let mut joiner = Lockspace::new(4, FSID, 0xfeed);
        joiner.set_deadlock_detect(deadlock);
        let mut joiner_model = Model::new(4, FSID);
        joiner_model.deadlock = deadlock;
        for (ch, (rd, entries)) in chunks.iter().zip(&model_chunks) {
            prop_assert_eq!(&ch.resource, rd);
            prop_assert_eq!(&ch.entries().collect::<Vec<_>>(), entries);
            joiner.restore(1000, ch.resource, ch.entries()).map_err(|x| TestCaseError::fail(x.to_string()))?;
            joiner_model.restore(rd, entries);
        }
        prop_assert_eq!(joiner.digest(), c.engines[0].digest());
        prop_assert_eq!(joiner.dump_text(), c.engines[0].dump_text());
        // node 1 restored from the same chunks counts its own locks as it did
        let mut again = Lockspace::new(NODES[0], FSID, 0xbeef);
        for ch in &chunks {
            again.restore(1000, ch.resource, ch.entries()).map_err(|x| TestCaseError::fail(x.to_string()))?;
        }
        prop_assert_eq!(again.our_lock_count(), c.engines[0].our_lock_count());
        // the joiner then behaves like the others: a purge of every node grants the same
        let mut a = Vec::new();
        let mut b = Vec::new();
        for n in NODES {
            joiner.purge_node(2000, n, &mut a);
            joiner_model.purge(n as i32, &mut b);
            prop_assert_eq!(joiner.dump_text(), joiner_model.dump());
        }
        prop_assert_eq!(joiner.lock_count(), 0);
        prop_assert_eq!(joiner.resource_count(), 0);
    }
}
