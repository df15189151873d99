//! `plock_locks_max`: a node whose processes hold that many granted locks in a lockspace
//! answers a request that would add one -ENOLCK itself, without multicasting it, in its
//! place among the replies of the fsid, in native and C-compatible mode alike. And a
//! native lockspace's only member decides every request itself.

use dlm_controld::lscore::{Action, LsCore, LsEnv};
use dlm_controld::membership::NoFencing as NoFence;
use dlm_cpg::Event;
use dlm_proto::LockspaceName;
use dlm_proto::errno::ENOLCK;
use dlm_proto::kernel::{PlockInfo, PlockOp};
use dlm_tests::foo_request;

const GET: PlockOp = PlockOp::GET;
const LOCK: PlockOp = PlockOp::LOCK;
const UNLOCK: PlockOp = PlockOp::UNLOCK;

fn env(f: &NoFence) -> LsEnv<'_> {
    LsEnv::quorate_unfenced(10_000, f)
}

/// Lockspace `foo` on node 1 and, unless alone, node 2, in one total order; multicasts
/// held until [`Nodes::deliver`]; node 1's replies kept.
struct Nodes {
    cores: Vec<LsCore>,
    queued: Vec<(u32, Vec<u8>)>,
    replies: Vec<PlockInfo>,
}

impl Nodes {
    /// Every node `native` or not; node 1 bounded at `max`.
    fn new(count: u32, native: bool, max: usize) -> Self {
        let mut n = Self {
            cores: (1..=count)
                .map(|id| {
                    let name = LockspaceName::new(b"foo").expect("name");
                    let mut core = LsCore::new(name, id, true, u64::from(id));
                    core.set_native(native);
                    core
                })
                .collect(),
            queued: Vec::new(),
            replies: Vec::new(),
        };
        n.cores[0].set_locks_max(max);
        let members: Vec<_> = (1..=count)
            .map(|nodeid| dlm_cpg::Member {
                nodeid,
                pid: 1,
                reason: dlm_cpg::Reason::from_raw(1),
            })
            .collect();
        for id in 1..=count {
            let ev = Event::ConfChg {
                members: members.clone(),
                left: vec![],
                joined: members.clone(),
            };
            let out = n.core(id).event(&env(&NoFence), ev);
            n.take(id, out);
        }
        n.deliver();
        assert!(!n.cores[0].kernel_stopped(), "the lockspace started");
        n
    }

    fn core(&mut self, id: u32) -> &mut LsCore {
        &mut self.cores[id as usize - 1]
    }

    fn take(&mut self, id: u32, out: Vec<Action>) {
        for a in out {
            match a {
                Action::Send(p) => self.queued.push((id, p)),
                Action::Reply(r) if id == 1 => self.replies.push(r),
                _ => {}
            }
        }
    }

    /// A request of node 1 read from the kernel, and the end of that loop turn (a batch
    /// goes out).
    fn request(&mut self, op: PlockOp, start: u64, end: u64) {
        let info = PlockInfo {
            nodeid: 1,
            ..foo_request(op, 5, 9, false, start, end)
        };
        let mut out = Vec::new();
        self.core(1).request(10_000, &info, &mut out);
        out.extend(self.core(1).flush());
        self.take(1, out);
    }

    /// Everything multicast so far reaches every node, in one order.
    fn deliver(&mut self) {
        while !self.queued.is_empty() {
            for (from, payload) in std::mem::take(&mut self.queued) {
                for id in (1u32..).take(self.cores.len()) {
                    let ev = Event::Deliver {
                        nodeid: from,
                        pid: 1,
                        payload: payload.clone(),
                    };
                    let out = self.core(id).event(&env(&NoFence), ev);
                    let out: Vec<_> = out.into_iter().chain(self.core(id).flush()).collect();
                    self.take(id, out);
                }
            }
        }
    }

    /// Node 1's replies so far, as (op, start, rv), forgotten.
    fn answers(&mut self) -> Vec<(PlockOp, u64, i32)> {
        std::mem::take(&mut self.replies)
            .into_iter()
            .map(|r| (r.op, r.start, r.rv))
            .collect()
    }
}

#[test]
fn at_the_bound_what_would_add_a_lock_is_refused_here_in_reply_order() {
    for native in [false, true] {
        let mut n = Nodes::new(2, native, 2);
        n.request(LOCK, 0, 9);
        n.request(LOCK, 20, 29);
        n.deliver();
        assert_eq!(
            n.answers(),
            [(LOCK, 0, 0), (LOCK, 20, 0)],
            "native {native}"
        );
        assert_eq!(n.core(1).plocks().our_lock_count(), 2);

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
        assert_eq!(n.core(1).plocks().our_lock_count(), 2);

        // C-compatible, the unlock is still in CPG when the lock is read: the lock is
        // refused, and its reply waits behind the unlock's; native (the file is node 1's
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
        assert_eq!(n.core(1).plocks().our_lock_count(), 2);
        // node 2's table holds node 1's locks (native: as of node 1's last STATE)
        if !native {
            assert_eq!(n.core(2).plocks().lock_count(), 2);
        }
    }
}

#[test]
fn no_bound_at_zero() {
    let mut n = Nodes::new(2, false, 0);
    for i in 0..5 {
        n.request(LOCK, i * 10, i * 10 + 1);
    }
    n.deliver();
    assert!(n.answers().iter().all(|&(_, _, rv)| rv == 0));
    assert_eq!(n.core(1).plocks().our_lock_count(), 5);
}

/// Alone in a native lockspace a node answers every request at once, multicasting
/// nothing, not even a claim for the file; C-compatible, alone or not, it multicasts each
/// request as C does.
#[test]
fn a_lone_native_member_decides_every_request_itself() {
    let mut n = Nodes::new(1, true, 0);
    n.request(LOCK, 0, 9);
    n.request(UNLOCK, 0, 3);
    n.request(GET, 0, 9);
    assert!(n.queued.is_empty(), "nothing multicast");
    assert_eq!(n.answers(), [(LOCK, 0, 0), (UNLOCK, 0, 0), (GET, 0, 0)]);
    assert_eq!(n.core(1).native_stats().local, 3);
    assert_eq!(n.core(1).plocks().our_lock_count(), 1);
    for count in [1, 2] {
        let mut n = Nodes::new(count, false, 0);
        n.request(LOCK, 0, 9);
        assert_eq!(n.queued.len(), 1, "{count} members: a PLOCK message");
        assert!(n.answers().is_empty());
        n.deliver();
        assert_eq!(n.answers(), [(LOCK, 0, 0)]);
        assert_eq!(n.core(1).native_stats().local, 0);
    }
}
