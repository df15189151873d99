//! `plock_locks_max`: a node whose processes hold that many granted locks in a lockspace
//! answers a request that would add one -ENOLCK itself, without multicasting it, in its
//! place among the replies of the fsid, in native and C-compatible mode alike.

use dlm_controld::lscore::{Action, LsCore, LsEnv};
use dlm_controld::membership::NoFencing as NoFence;
use dlm_cpg::Event;
use dlm_proto::LockspaceName;
use dlm_proto::errno::ENOLCK;
use dlm_proto::kernel::{PlockInfo, PlockOp};
use dlm_tests::foo_request;

fn env(f: &NoFence) -> LsEnv<'_> {
    LsEnv::quorate_unfenced(10_000, f)
}

/// Node 1 alone in lockspace `foo`, its multicasts held until [`One::deliver`].
struct One {
    core: LsCore,
    queued: Vec<Vec<u8>>,
    replies: Vec<PlockInfo>,
}

impl One {
    fn new(native: bool, max: usize) -> Self {
        let name = LockspaceName::new(b"foo").expect("name");
        let mut core = LsCore::new(name, 1, true, 0x5eed);
        core.set_native(native);
        core.set_locks_max(max);
        let us = dlm_cpg::Member {
            nodeid: 1,
            pid: 1,
            reason: dlm_cpg::Reason::from_raw(1),
        };
        let ev = Event::ConfChg {
            members: vec![us],
            left: vec![],
            joined: vec![us],
        };
        let mut one = Self {
            queued: Vec::new(),
            replies: Vec::new(),
            core,
        };
        let out = one.core.event(&env(&NoFence), ev);
        one.take(out);
        one.deliver();
        assert!(!one.core.kernel_stopped(), "the lockspace started");
        one
    }

    fn take(&mut self, out: Vec<Action>) {
        for a in out {
            match a {
                Action::Send(p) => self.queued.push(p),
                Action::Reply(r) => self.replies.push(r),
                _ => {}
            }
        }
    }

    /// A request read from the kernel, and the end of that loop turn (a batch goes out).
    fn request(&mut self, op: PlockOp, start: u64, end: u64) {
        let info = PlockInfo {
            nodeid: 1,
            ..foo_request(op, 5, 9, false, start, end)
        };
        let mut out = Vec::new();
        self.core.request(10_000, &info, &mut out);
        out.extend(self.core.flush());
        self.take(out);
    }

    /// Everything multicast so far comes back in order.
    fn deliver(&mut self) {
        while !self.queued.is_empty() {
            for payload in std::mem::take(&mut self.queued) {
                let ev = Event::Deliver {
                    nodeid: 1,
                    pid: 1,
                    payload,
                };
                let out = self.core.event(&env(&NoFence), ev);
                self.take(out);
            }
        }
    }

    /// The replies so far, as (op, start, rv), and forgets them.
    fn answers(&mut self) -> Vec<(PlockOp, u64, i32)> {
        std::mem::take(&mut self.replies)
            .into_iter()
            .map(|r| (r.op, r.start, r.rv))
            .collect()
    }
}

#[test]
fn at_the_bound_what_would_add_a_lock_is_refused_here_in_reply_order() {
    const GET: PlockOp = PlockOp::GET;
    const LOCK: PlockOp = PlockOp::LOCK;
    const UNLOCK: PlockOp = PlockOp::UNLOCK;
    for native in [false, true] {
        let mut n = One::new(native, 2);
        n.request(LOCK, 0, 9);
        n.request(LOCK, 20, 29);
        n.deliver();
        assert_eq!(
            n.answers(),
            [(LOCK, 0, 0), (LOCK, 20, 0)],
            "native {native}"
        );
        assert_eq!(n.core.plocks().our_lock_count(), 2);

        // a third lock, and a cut of one in two: answered here, nothing multicast
        n.request(LOCK, 40, 49);
        n.request(UNLOCK, 3, 4);
        assert!(n.queued.is_empty(), "native {native}: refused without CPG");
        assert_eq!(n.answers(), [(LOCK, 40, -ENOLCK), (UNLOCK, 3, -ENOLCK)]);
        // what cannot add a lock goes on as ever
        n.request(UNLOCK, 0, 1);
        n.request(GET, 40, 49);
        n.deliver();
        assert_eq!(
            n.answers(),
            [(UNLOCK, 0, 0), (GET, 40, 0)],
            "native {native}"
        );
        assert_eq!(n.core.plocks().our_lock_count(), 2);

        // C-compatible, the unlock is still in CPG when the lock is read: the lock is
        // refused, and its reply waits behind the unlock's; native (the file is ours
        // alone) the unlock is decided at once and the lock finds room
        n.request(UNLOCK, 2, 9);
        n.request(LOCK, 40, 49);
        if !native {
            assert!(n.answers().is_empty(), "the refusal overtook the unlock");
        }
        n.deliver();
        let lock_rv = if native { 0 } else { -ENOLCK };
        assert_eq!(n.answers(), [(UNLOCK, 2, 0), (LOCK, 40, lock_rv)]);

        // room again once the unlock is applied
        if !native {
            n.request(LOCK, 40, 49);
            n.deliver();
            assert_eq!(n.answers(), [(LOCK, 40, 0)]);
        }
        assert_eq!(n.core.plocks().our_lock_count(), 2);
    }
}

#[test]
fn no_bound_at_zero() {
    let mut n = One::new(false, 0);
    for i in 0..5 {
        n.request(PlockOp::LOCK, i * 10, i * 10 + 1);
    }
    n.deliver();
    assert!(n.answers().iter().all(|&(_, _, rv)| rv == 0));
    assert_eq!(n.core.plocks().our_lock_count(), 5);
}
