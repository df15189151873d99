//! Deterministic simulation of whole clusters: 3 to 5 nodes, each running the daemon's own
//! lockspace logic (`LsCore`, not a copy) on the simulated CPG bus, with random plock
//! workloads from several processes per node (on some seeds from the first node while it is
//! alone), a crash, a late join during the storm (state transfer) and a partition (the minority is killed at the merge, as corosync does on the
//! daemon's request).
//!
//! Checked after every step: no replica ever holds two conflicting locks, and no request
//! is answered twice. Checked whenever the cluster is quiet: every live replica has the same
//! digest; for every owner the bytes it holds in every table are exactly the bytes its
//! replies say it holds (nothing lost, nothing phantom); every non-blocking request was
//! answered; every unanswered blocking request is still a waiter. A failure prints the seed;
//! `DLM_SIM_SEED=n` replays it, `DLM_SIM_RUNS=n` sets the number of seeds (default 1000),
//! `DLM_SIM_FROM=n` the first.
//! A second scenario crashes the sending node or another member part-way through a state
//! transfer (plock-spec §5.8 cases 1 and 2, which C ends with a partial or stale table).
//! Fencing outcomes: a failed node is fenced a random number of ticks after it fails; until
//! then no replica of a survivor may lose any of its locks or waiters (the lockspace waits
//! for fencing), and at the end every replica has purged them. At the very end every waiter
//! left must still conflict with a granted lock of another owner (after a no-op UNLOCK on
//! each inode, for C's single-pass anomaly): a waiter whose conflict went away was granted.

mod procs;
mod sim;

use std::collections::{BTreeMap, BTreeSet};

use dlm_controld::daemon_core::FenceFacts;
use dlm_controld::lscore::NativeStats;
use dlm_cpg::SimBus;
use dlm_testkit::{Rng, seeds};

use sim::{Sim, Watch, check_grants, drain_closes};

fn run(seed: u64) -> (NativeStats, u64) {
    let mut rng = Rng::new(seed);
    let n = 3 + u32::try_from(rng.next(3)).expect("small");
    // native everywhere; or a C-compatible node from the start (its crash, if it is the
    // victim, turns native mode on), or as the late joiner (it turns it off)
    let plain = match seed % 4 {
        2 => BTreeSet::from([1]),
        3 => BTreeSet::from([n]),
        _ => BTreeSet::new(),
    };
    let mut sim = Sim::new(seed, n, plain);
    // every third seed: no periodic sync of local decisions (plock_native_sync_ms=0)
    sim.sync_every = (seed % 3 != 1).then_some(3);
    // every fifth seed: deadlock detection on every node (cycles across nodes are refused
    // on every replica alike, through crashes, joins and the partition)
    sim.deadlock = seed % 5 == 4;
    // all but the last node join first; the last joins during the storm
    for id in 1..n {
        if id == 1 && seed % 7 == 5 {
            // the others are up in the cluster, not yet in the lockspace
            sim.outside = n;
        }
        sim.join(id);
        sim.settle();
        if id == 1 && seed % 7 == 5 {
            // node 1 alone for a while (a generator of its own: the other seeds' runs stay
            // as they were): native, it decides its requests itself; C-compatible, it
            // multicasts them; the joiners take its table
            let mut alone = Rng::new(seed ^ 0xa10e);
            for _ in 0..1 + alone.next(12) {
                sim.request(&mut alone, 1);
            }
            let local = sim.nodes.get(&1).map(|x| x.core.native_stats().local);
            let native = !sim.plain.contains(&1) && !sim.deadlock;
            assert_eq!(
                local > Some(0),
                native,
                "seed {seed}: {local:?} decided alone"
            );
            sim.settle();
        }
    }
    for node in sim.nodes.values_mut() {
        drain_closes(node, true);
    }
    sim.check_quiet();
    let crash_at = 40 + rng.next(40);
    let join_at = 20 + rng.next(60);
    let split_at = 100 + rng.next(30);
    let fresh_at: BTreeSet<u64> = (0..4).map(|_| rng.next(180)).collect();
    let mut watch = Watch::default();
    for t in 0..180u64 {
        if t == join_at {
            sim.join(n);
        }
        if t == crash_at {
            let victim = 1 + u32::try_from(rng.next(u64::from(n - 1))).expect("small");
            let delay = rng.next(25);
            sim.fail(victim, delay, &mut watch);
        }
        let live: Vec<u32> = sim
            .nodes
            .values()
            .filter(|x| x.group.is_some())
            .map(|x| x.id)
            .collect();
        let majority_left = 2 * (live.len() as u64).saturating_sub(1) > u64::from(n);
        if t == split_at && majority_left {
            // cut off one live node: a minority of one, while the rest keeps quorum
            let lone = live[usize::try_from(rng.next(live.len() as u64)).expect("small")];
            sim.bus.partition(&[lone], 1);
            if let Some(node) = sim.nodes.get_mut(&lone) {
                node.side = 1;
            }
        }
        if t == split_at + 30 {
            // the merge: the minority node is killed (stateful merge), the rest goes on
            let lone: Vec<u32> = sim
                .nodes
                .values()
                .filter(|x| x.side == 1)
                .map(|x| x.id)
                .collect();
            for id in lone {
                let delay = rng.next(10);
                sim.fail(id, delay, &mut watch);
                if let Some(node) = sim.nodes.get_mut(&id) {
                    node.side = 0;
                }
            }
            sim.bus.heal();
        }
        for _ in 0..rng.next(4) {
            let id = 1 + u32::try_from(rng.next(u64::from(n))).expect("small");
            sim.request(&mut rng, id);
        }
        for _ in 0..rng.next(6) {
            sim.bus.step();
        }
        sim.settle();
        if fresh_at.contains(&t) {
            let b = 1 + u32::try_from(rng.next(u64::from(n))).expect("small");
            sim.check_fresh(b);
        }
        check_grants(&sim);
        sim.tick(&mut watch);
    }
    sim.fence_all(&mut watch);
    sim.sync_all();
    for node in sim.nodes.values_mut().filter(|x| x.group.is_some()) {
        drain_closes(node, true);
    }
    sim.check_quiet();
    sim.check_waiters();
    sim.sync_all();
    for node in sim.nodes.values_mut().filter(|x| x.group.is_some()) {
        drain_closes(node, true);
    }
    sim.check_quiet();
    (sim.native_stats(), sim.deadlocks())
}

/// plock-spec §5.8 cases 1 and 2, which C leaves wrong: while a fourth node receives the
/// table, the node sending it (case 1) or another member (case 2) crashes part-way; in the
/// end every live replica has the same table and nothing of a live owner is lost.
fn transfer_failure(seed: u64) {
    let mut rng = Rng::from_state(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
    let mut sim = Sim {
        bus: SimBus::new(seed),
        nodes: BTreeMap::new(),
        configured: 4,
        serial: 0,
        seed,
        clock: 1,
        fence: FenceFacts::default(),
        plain: BTreeSet::new(),
        older: BTreeSet::new(),
        turns: 0,
        sync_every: Some(3),
        deadlock: false,
        stats: NativeStats::default(),
        outside: 0,
    };
    for id in 1..=3 {
        sim.join(id);
        sim.settle();
    }
    for node in sim.nodes.values_mut() {
        drain_closes(node, true);
    }
    for _ in 0..30 {
        for id in 1..=3 {
            sim.request(&mut rng, id);
        }
        sim.settle();
    }
    sim.join(4);
    // part of the join and of the transfer happens, then a member dies
    let turns = usize::try_from(rng.next(40)).expect("small");
    sim.settle_for(turns);
    let victim = if seed % 2 == 0 {
        1
    } else {
        2 + u32::try_from(rng.next(2)).expect("small")
    };
    let mut watch = Watch::default();
    let delay = rng.next(8);
    sim.fail(victim, delay, &mut watch);
    for _ in 0..10 {
        for id in [1, 2, 3, 4] {
            sim.request(&mut rng, id);
        }
        sim.settle_for(3);
        sim.tick(&mut watch);
    }
    sim.fence_all(&mut watch);
    for node in sim.nodes.values_mut().filter(|x| x.group.is_some()) {
        drain_closes(node, true);
    }
    sim.check_quiet();
}

/// Seeds beyond the default thousand that once found a defect, run every time. 2272: a
/// recall begun by a held request applied as the kernel started (before the change counted
/// as native) never sent the owner's RELEASE, and node 2's UNLOCK was never answered.
/// 2768: the model's own error (a blocking grant overtook an older unlock's reply and a
/// CLOSE's turn; the model applied them in reply order, the daemon rightly in request order).
/// 30780: the model's too: an owner cut off by a partition decided a request for its own
/// resource before its confchg told it (as a real daemon may), which the model forbade.

#[test]
fn seeds_that_once_failed() {
    for seed in [2272, 2768, 30780, 86787] {
        run(seed);
    }
}

#[test]
fn transfer_survives_a_crash_mid_transfer() {
    let runs = std::env::var("DLM_SIM_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300u64);
    let list: Vec<u64> = match std::env::var("DLM_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("DLM_SIM_SEED is a number")],
        Err(_) => (1..=runs).collect(),
    };
    for seed in list {
        transfer_failure(seed);
    }
}

#[test]
fn clusters_never_grant_twice_nor_lose_a_lock() {
    let list = seeds(1000);
    let mut total = NativeStats::default();
    let mut deadlocks = 0;
    for &seed in &list {
        let r = std::panic::catch_unwind(|| run(seed));
        let Ok((s, d)) = r else {
            panic!("cluster simulation failed: replay with DLM_SIM_SEED={seed}");
        };
        total.local += s.local;
        total.recalls += s.recalls;
        assert!(
            d == 0 || seed % 5 == 4,
            "seed {seed}: EDEADLK without detection"
        );
        deadlocks += d;
    }
    // the seeds with deadlock detection met cycles and refused them
    if list.len() >= 100 {
        assert!(deadlocks > 0, "no cycle was ever refused");
    }
    // the runs exercised native mode: local decisions and recalls both happened
    if list.len() >= 100 {
        assert!(
            total.local > list.len() as u64 / 2 && total.recalls > list.len() as u64 / 2,
            "native mode barely ran: {total:?}"
        );
    }
}
