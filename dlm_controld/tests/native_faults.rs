//! Seeded runs of whole clusters in which faults come at any step: 2 to 5 nodes, each
//! running the daemon's own `LsCore` (`world/`), where every step — the bus ordering one
//! message, a node handling one event, ending a loop turn, sending STATEs or a portion of
//! its table, a request from a process, a dump — is picked by the seed, and so is every
//! fault: a crash, a leave, a join (of ours, of a C-compatible node, of ours from before
//! SYNC), a node cut off and the partition's merge, with requests, batches, STATEs,
//! RELEASEs and a transfer in flight. Processes take and drop byte ranges with F_SETLK,
//! F_SETLKW, F_GETLK, CANCEL (an interrupted wait) and CLOSE, and now and then in patterns:
//! a burst of one owner's locks, or waits C's single waiter pass leaves one grantable
//! behind; on some seeds native mode's bounds are a few entries (a resource crosses the
//! give-back threshold and a STATE's size within a run). Checked at every step: no range granted twice, every reply matched as the
//! kernel matches it and answered once; at every quiet point: the replicas agree (owners,
//! recalls, every resource but an owner's own newer copy), every process's bytes are in its
//! table, nothing unanswered; at the end, after fencing and a settle: nothing waits that
//! could be granted.
//!
//! CI runs seeds 1..=300; more before a release (about 3 minutes a thousand in a debug
//! build on this machine):
//!
//!     DLM_SIM_RUNS=100000 cargo test -p dlm_controld --release --test native_faults
//!
//! `DLM_SIM_SEED=<n>` replays one seed, `DLM_SIM_FROM=<n>` starts at seed n.

mod procs;
mod world;

use dlm_controld::native::Limits;
use dlm_proto::kernel::PlockOp;
use dlm_testkit::{Rng, seeds};

use world::{Kind, Step, World};

/// Files the processes use: one of its own for each node (the node's number), which its
/// processes use most (native mode owns it, decides it locally, is recalled from it), and
/// file 0, which all share.
const FILES: u64 = 6;

/// A file for a request of node `n`: its own seven times in ten, else any.
fn file(rng: &mut Rng, n: u32) -> u64 {
    if rng.next(10) < 7 {
        u64::from(n) % FILES
    } else {
        rng.next(FILES)
    }
}
/// Bytes of each file they lock.
const BYTES: u64 = 16;

/// A run's settings, drawn from its seed.
struct Plan {
    nodes: u32,
    /// Kind of the node that joins late (the last), if any joins late.
    late: Option<Kind>,
    /// Node 1 runs alone for a while before the others join.
    alone_first: bool,
    /// STATEs of local decisions go out on a timer (a Sync step now and then), or only when
    /// something else sends them (`plock_native_sync_ms=0`).
    timer: bool,
    steps: u32,
    faults: u32,
}

fn plan(seed: u64, rng: &mut Rng, w: &mut World) -> Plan {
    // a joiner of ours meets a claim of another member (seed % 6 == 3): three or more
    let least = if seed % 6 == 3 { 3 } else { 2 };
    let nodes = (2 + u32::try_from(rng.next(4)).unwrap_or(0)).max(least);
    w.configured = nodes;
    w.fencing = true;
    if seed % 3 == 0 {
        // a resource crosses the give-back threshold and a STATE's size within a few
        // requests; a message holds few entries, so batches split
        w.limits = Limits {
            owned_max: 3,
            claim_max: 2,
            release_at: 3,
            state_max: 6,
            batch_max: 8,
            idle_ms: 3000,
            transfer_first: usize::from(seed % 2 == 0), // 0 with a joiner of ours (seed % 6 == 3)
        };
    }
    w.deadlock = seed % 13 == 6;
    let late = match seed % 6 {
        1 => Some(Kind::Plain),
        2 => Some(Kind::Older),
        3 | 4 => Some(Kind::Ours),
        _ => None,
    };
    Plan {
        nodes,
        late,
        alone_first: seed % 7 == 5,
        timer: seed % 4 != 1,
        steps: 500,
        faults: 1 + u32::try_from(rng.next(3)).unwrap_or(0),
    }
}

/// A random request of a live node's process, or a CANCEL of a blocked one's wait.
fn request(w: &mut World, rng: &mut Rng, n: u32) -> Option<Step> {
    let p = w.peer(n);
    if p.pid.is_none() || p.core.kernel_stopped() && p.core.needs_plocks() {
        return None; // the kernel sends nothing before the join completes
    }
    let proc = rng.next(3);
    let owner = u64::from(n) * 10 + proc;
    if let Some(serial) = p.procs.blocked(owner) {
        // a blocked process only waits, or is interrupted
        return if rng.next(6) == 0 {
            w.cancel(n, serial)
        } else {
            None
        };
    }
    let number = file(rng, n);
    let start = rng.next(BYTES);
    let end = (start + rng.next(5)).min(BYTES - 1);
    let ex = rng.next(2) == 0;
    Some(match rng.next(100) {
        0..=29 => w.ask(n, proc, PlockOp::LOCK, ex, false, number, (start, end)),
        30..=49 => w.ask(n, proc, PlockOp::LOCK, ex, true, number, (start, end)),
        50..=74 => w.ask(n, proc, PlockOp::UNLOCK, false, false, number, (start, end)),
        75..=89 => w.ask(n, proc, PlockOp::GET, ex, false, number, (start, end)),
        _ => w.close(n, proc, number),
    })
}

/// A burst: one process locks many single bytes of one file before anything is delivered
/// (threads of one process, or processes of one owner): its resource crosses the bounds.
fn burst(w: &mut World, rng: &mut Rng, n: u32) -> Vec<Step> {
    let p = w.peer(n);
    if p.pid.is_none() || p.core.needs_plocks() || p.procs.blocked(u64::from(n) * 10).is_some() {
        return Vec::new();
    }
    let number = file(rng, n);
    (0..4 + rng.next(6))
        .map(|b| w.ask(n, 0, PlockOp::LOCK, true, false, number, (b * 2, b * 2)))
        .collect()
}

/// A pattern C's single waiter pass leaves a waiter grantable behind (plock-spec §2.8),
/// asked at once by three processes of node `n`: owner 0 holds ex `b..=b+5`, owner 1 ex
/// `b+6..=b+10`; owner 2 waits for sh `b..=b+10`, owner 1 for sh `b+4..=b+10`; owner 0
/// unlocks: the pass grants owner 1, which leaves owner 2 grantable behind it.
fn behind_the_pass(w: &mut World, rng: &mut Rng, n: u32) -> (Vec<Step>, Option<Probe>) {
    let p = w.peer(n);
    if p.pid.is_none() || p.core.needs_plocks() {
        return (Vec::new(), None);
    }
    // three processes of their own (what is left waiting stays out of the others' way)
    let first = 3 + 3 * rng.next(30);
    let (o0, o1, o2) = (first, first + 1, first + 2);
    if [o0, o1, o2]
        .iter()
        .any(|&o| p.procs.blocked(u64::from(n) * 10 + o).is_some())
    {
        return (Vec::new(), None);
    }
    let (number, b) = (file(rng, n), rng.next(BYTES - 10));
    let (lock, unlock) = (PlockOp::LOCK, PlockOp::UNLOCK);
    let probe = Probe {
        of: n,
        number,
        range: (b, b + 3),
        after: rng.next(12),
    };
    let steps = vec![
        w.ask(n, o0, lock, true, false, number, (b, b + 5)),
        w.ask(n, o1, lock, true, false, number, (b + 6, b + 10)),
        w.ask(n, o2, lock, false, true, number, (b, b + 10)),
        w.ask(n, o1, lock, false, true, number, (b + 4, b + 10)),
        w.ask(n, o0, unlock, false, false, number, (b, b + 5)),
    ];
    (steps, Some(probe))
}

/// After the pattern behind the pass and a fault: another node's process asks for bytes
/// the waiter left behind wants (granted there while node `of` granted the waiter is the
/// double grant of issue 51's first defect).
struct Probe {
    of: u32,
    number: u64,
    range: (u64, u64),
    /// Steps to wait after the fault.
    after: u64,
}

/// The probe's request, from a free process of a live node other than the pattern's.
fn probe(w: &mut World, rng: &mut Rng, p: &Probe) -> Option<Step> {
    let others: Vec<u32> = live(w).into_iter().filter(|&n| n != p.of).collect();
    if others.is_empty() {
        return None;
    }
    let n = others[usize::try_from(rng.next(others.len() as u64)).unwrap_or(0)];
    let peer = w.peer(n);
    if peer.core.kernel_stopped() && peer.core.needs_plocks() {
        return None;
    }
    let proc = (95..100).find(|&o| peer.procs.blocked(u64::from(n) * 10 + o).is_none())?;
    Some(w.ask(n, proc, PlockOp::LOCK, true, false, p.number, p.range))
}

/// Live nodes.
fn live(w: &World) -> Vec<u32> {
    w.peers
        .values()
        .filter(|p| p.pid.is_some())
        .map(|p| p.id)
        .collect()
}

/// A lock of file `number`, which no process used before, by a free process of a live
/// member not in `not` (native mode claims the file for its node).
fn claim(w: &mut World, rng: &mut Rng, not: &[u32], number: u64) -> Option<Step> {
    let others: Vec<u32> = live(w)
        .into_iter()
        .filter(|n| !not.contains(n) && !w.peer(*n).core.needs_plocks())
        .collect();
    if others.is_empty() {
        return None;
    }
    let n = others[usize::try_from(rng.next(others.len() as u64)).unwrap_or(0)];
    let proc = (95..100).find(|&o| w.peer(n).procs.blocked(u64::from(n) * 10 + o).is_none())?;
    Some(w.ask(n, proc, PlockOp::LOCK, true, false, number, (0, 3)))
}

/// Another lock of `number` by a free process of node `n`, beside its claim's bytes.
fn claim_more(w: &mut World, n: u32, number: u64) -> Option<Step> {
    let p = w.peer(n);
    p.pid?;
    let proc = (95..100).find(|&o| p.procs.blocked(u64::from(n) * 10 + o).is_none())?;
    Some(w.ask(n, proc, PlockOp::LOCK, true, false, number, (5, 6)))
}

/// A crash of a live member other than `of`, keeping a majority, or none.
fn fail_beside(w: &World, rng: &mut Rng, plan: &Plan, of: u32) -> Option<Step> {
    let live = live(w);
    let others: Vec<u32> = live.iter().copied().filter(|&n| n != of).collect();
    let up = plan.nodes as usize - w.unfenced.len() - 1;
    if others.is_empty() || rng.next(4) == 0 || 2 * up <= plan.nodes as usize {
        return None;
    }
    Some(Step::Crash(
        others[usize::try_from(rng.next(others.len() as u64)).unwrap_or(0)],
    ))
}

/// A fault that keeps a majority of the cluster in the lockspace, or none.
fn fault(w: &mut World, rng: &mut Rng, plan: &Plan) -> Option<Step> {
    let live = live(w);
    let split = w.peers.values().any(|p| p.side == 1 && p.pid.is_some());
    if split {
        return Some(Step::Heal);
    }
    // a majority of the cluster stays up on side 0 (the nodes not in the lockspace count)
    let down = w.unfenced.len();
    let majority =
        |k: usize| 2 * (plan.nodes as usize - down - (live.len() - k)) > plan.nodes as usize;
    // nodes that were in the lockspace and are out now (left, or failed and fenced)
    let out: Vec<u32> = w
        .peers
        .values()
        .filter(|p| p.pid.is_none() && !w.unfenced.contains(&p.id))
        .map(|p| p.id)
        .collect();
    let pick = |v: &[u32], rng: &mut Rng| v[usize::try_from(rng.next(v.len() as u64)).unwrap_or(0)];
    match rng.next(4) {
        0 if !out.is_empty() => Some(Step::Join(pick(&out, rng), Kind::Ours)),
        1 if majority(live.len() - 1) && live.len() > 1 => Some(Step::Crash(pick(&live, rng))),
        2 if majority(live.len() - 1) && live.len() > 2 => Some(Step::Split(pick(&live, rng))),
        3 if live.len() > 1 => {
            // a node whose processes have nothing outstanding unmounts
            let idle: Vec<u32> = live
                .iter()
                .copied()
                .filter(|&n| {
                    let p = w.peer(n);
                    p.started()
                        && p.procs.unanswered().next().is_none()
                        && p.procs.waiting().next().is_none()
                })
                .collect();
            (!idle.is_empty() && majority(live.len() - 1)).then(|| Step::Leave(pick(&idle, rng)))
        }
        _ => None,
    }
}

fn run(seed: u64) {
    let mut rng = Rng::new(seed);
    let mut w = World::new(seed, 0);
    let plan = plan(seed, &mut rng, &mut w);
    let first = if plan.late.is_some() {
        plan.nodes - 1
    } else {
        plan.nodes
    };
    w.step(&Step::Join(1, Kind::Ours));
    if plan.alone_first {
        // node 1 alone for a while: it decides everything itself; the joiners take its table
        w.configured = 1;
        w.settle();
        for _ in 0..1 + rng.next(8) {
            if let Some(s) = request(&mut w, &mut rng, 1) {
                w.step(&s);
            }
        }
        w.configured = plan.nodes;
    }
    for n in 2..=first {
        w.step(&Step::Join(n, Kind::Ours));
    }
    let late_at = rng.next(u64::from(plan.steps) / 2);
    let mut faults = plan.faults;
    let mut fault_in: Option<u64> = None;
    let mut probing: Option<Probe> = None;
    // steps left to wait for a transfer to start, to claim a file while it runs
    let mut fresh: Option<u64> = None;
    // the claimant and its file: once its claim is answered (the sender holds it), the
    // joiner fails while the transfer runs (within so many steps, or not at all)
    let mut interrupt: Option<(u32, u64, u64)> = None;
    for t in 0..u64::from(plan.steps) {
        if t == late_at {
            if let Some(kind) = plan.late.filter(|_| !w.peers.contains_key(&plan.nodes)) {
                w.step(&Step::Join(plan.nodes, kind));
                // now and then, while the table is sent: a member claims a fresh file, and a
                // fault soon after (an interrupted transfer)
                if faults > 0 && rng.next(2) == 0 {
                    fresh = Some(250);
                }
            }
        }
        if let Some(k) = fresh {
            fresh = k.checked_sub(1);
            let sender = w.peers.values().find(|p| p.core.sending()).map(|p| p.id);
            if let Some(x) = sender {
                fresh = None;
                if let Some(s) = claim(&mut w, &mut rng, &[x, plan.nodes], 100 + t) {
                    if let Step::Ask(n, _, _) = s {
                        interrupt = Some((n, 100 + t, 60));
                    }
                    w.step(&s);
                }
            }
        }
        if let Some((n, number, k)) = interrupt {
            interrupt = k.checked_sub(1).map(|k| (n, number, k));
            let answered = !w
                .peer(n)
                .procs
                .unanswered()
                .any(|p| p.info.number == number);
            let sending = w.peers.values().any(|p| p.core.sending());
            if answered && faults > 0 && w.peer(plan.nodes).pid.is_some() {
                interrupt = None;
                if sending {
                    faults -= 1;
                    w.step(&Step::Crash(plan.nodes));
                    // the claimant's next lock of the file, which it may decide alone
                    if let Some(s) = claim_more(&mut w, n, number) {
                        w.step(&s);
                    }
                }
            }
        }
        let soon = fault_in.is_some_and(|k| k == 0);
        fault_in = fault_in.and_then(|k| k.checked_sub(1));
        let pick = if soon && faults > 0 {
            97
        } else {
            rng.next(100)
        };
        let steps: Vec<Step> = match pick {
            0..=54 => {
                // a transfer that a claim is to meet goes slowly until the joiner fails
                let slow = fresh.is_some() || interrupt.is_some();
                let e: Vec<Step> = w
                    .enabled(false)
                    .into_iter()
                    .filter(|s| plan.timer || !matches!(s, Step::Sync(_)))
                    .filter(|s| !slow || !matches!(s, Step::Pump(_)))
                    .collect();
                if e.is_empty() {
                    Vec::new()
                } else {
                    vec![e[usize::try_from(rng.next(e.len() as u64)).unwrap_or(0)].clone()]
                }
            }
            55..=79 => {
                let live = live(&w);
                let n = live[usize::try_from(rng.next(live.len() as u64)).unwrap_or(0)];
                request(&mut w, &mut rng, n).into_iter().collect()
            }
            80 => {
                let live = live(&w);
                let n = live[usize::try_from(rng.next(live.len() as u64)).unwrap_or(0)];
                burst(&mut w, &mut rng, n)
            }
            81 => {
                let live = live(&w);
                let n = live[usize::try_from(rng.next(live.len() as u64)).unwrap_or(0)];
                // a fault soon after, now and then (while the decisions are unsent), then
                // another node's probe of the bytes
                let (steps, p) = behind_the_pass(&mut w, &mut rng, n);
                if rng.next(2) == 0 && faults > 0 {
                    fault_in = Some(rng.next(8));
                    probing = p;
                }
                steps
            }
            82..=84 => {
                let live = live(&w);
                vec![Step::Dump(
                    live[usize::try_from(rng.next(live.len() as u64)).unwrap_or(0)],
                )]
            }
            85..=88 => vec![Step::Tick(200 + rng.next(2000))],
            89..=91 => live(&w).into_iter().map(Step::Poll).collect(),
            92..=94 if w.can_fence() => w
                .unfenced
                .iter()
                .next()
                .map(|&n| Step::Fence(n))
                .into_iter()
                .collect(),
            95..=96 => {
                // a pause: everything in flight arrives, then the quiet point's checks
                w.settle_with(plan.timer);
                Vec::new()
            }
            _ if faults > 0 && (soon || rng.next(4) == 0) => {
                // after the pattern behind the pass: mostly another member fails (its purge)
                let beside = probing.as_ref().filter(|_| soon).map(|p| p.of);
                let f = beside
                    .and_then(|of| fail_beside(&w, &mut rng, &plan, of))
                    .or_else(|| fault(&mut w, &mut rng, &plan));
                if f.is_some() {
                    faults -= 1;
                    fault_in = None;
                }
                f.into_iter().collect()
            }
            _ => Vec::new(),
        };
        for s in &steps {
            w.step(s);
        }
        if fault_in.is_none() {
            if let Some(p) = probing.as_mut() {
                if p.after == 0 {
                    let p = probing.take();
                    if let Some(s) = p.and_then(|p| probe(&mut w, &mut rng, &p)) {
                        w.step(&s);
                    }
                } else {
                    p.after -= 1;
                }
            }
        }
        if w.quiet() {
            w.check_quiet();
        }
    }
    if w.peers.values().any(|p| p.side == 1 && p.pid.is_some()) {
        w.step(&Step::Heal);
    }
    w.settle();
    assert!(
        w.quiet(),
        "seed {seed}: not quiet after the settle:\n{}",
        w.unquiet()
    );
    w.check_quiet();
    check_waiters(&mut w);
}

/// Every waiter left must still conflict with a granted lock of another owner: one whose
/// conflict went away was granted. C's single waiter pass can leave one grantable until the
/// next operation on its file (plock-spec §2.8), so every file first gets a no-op UNLOCK,
/// until passes grant nothing more.
fn check_waiters(w: &mut World) {
    let seed = w.seed;
    let Some(&poker) = live(w).first() else {
        return;
    };
    for _ in 0..4 {
        for number in 0..FILES {
            let s = w.ask(
                poker,
                9,
                PlockOp::UNLOCK,
                false,
                false,
                number,
                (BYTES + 10, BYTES + 10),
            );
            w.step(&s);
        }
        w.settle();
    }
    w.check_quiet();
    for p in w.peers.values().filter(|p| p.pid.is_some()) {
        let entries: Vec<_> = p.core.plocks().dump(0).collect();
        for x in entries.iter().filter(|e| e.waiting) {
            let blocked = entries.iter().any(|g| {
                !g.waiting
                    && g.number == x.number
                    && (g.nodeid, g.owner) != (x.nodeid, x.owner)
                    && g.start <= x.end
                    && x.start <= g.end
                    && (g.ex || x.ex)
            });
            assert!(
                blocked,
                "seed {seed}: node {}: waiter {x:?} could be granted\n{}",
                p.id,
                p.core.plocks().dump_text()
            );
        }
    }
}

#[test]
fn faults_at_any_step_never_break_the_table() {
    for seed in seeds(1000) {
        let r = std::panic::catch_unwind(|| run(seed));
        assert!(
            r.is_ok(),
            "native fault simulation failed: replay with DLM_SIM_SEED={seed}"
        );
    }
}
