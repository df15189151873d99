//! The simulated bus keeps CPG's promises: one total order, virtual synchrony (every
//! survivor sees the same messages between the same membership changes), atomic loss of a
//! crashed node's unordered messages, partitions seen from both sides, merges as NodeUp,
//! and the same trace for the same seed. `DLM_SIM_SEED` replays one seed;
//! `DLM_SIM_RUNS` sets how many seeds run (default 300).

#![allow(clippy::cast_possible_truncation)]

use dlm_cpg::{Event, Group, Reason, SimBus, SimGroup};
use dlm_testkit::{Rng, seeds};

/// Per-node logs, the bus trace, and which nodes are still alive.
type Outcome = (Vec<Vec<Event>>, Vec<(Vec<u8>, u32, Vec<u8>)>, Vec<bool>);

const NAME: &[u8] = b"dlm:ls:sim\0";

/// Events without totem changes (which carry ring numbers, not group order).
fn log(g: &mut SimGroup, into: &mut Vec<Event>) {
    while let Some(e) = g.poll_event() {
        if !matches!(e, Event::Totem { .. }) {
            into.push(e);
        }
    }
}

/// Runs one random scenario; returns every node's log and the bus trace.
fn scenario(seed: u64, partitions: bool) -> Outcome {
    let bus = SimBus::new(seed);
    let mut rng = Rng::new(seed);
    let n = 3 + rng.next(3) as usize;
    let mut groups: Vec<SimGroup> = (1..=n as u32)
        .map(|id| bus.join(id, NAME).expect("join"))
        .collect();
    let mut logs: Vec<Vec<Event>> = vec![Vec::new(); n];
    // everyone has joined before the logs start
    for (g, l) in groups.iter_mut().zip(&mut logs) {
        log(g, l);
        l.clear();
    }
    let mut alive = vec![true; n];
    let mut split = false;
    let victim = rng.next(n as u64) as usize;
    for t in 0..200u32 {
        match rng.next(20) {
            0 if t > 50 && alive[victim] && !partitions => {
                bus.crash(victim as u32 + 1);
                alive[victim] = false;
            }
            1 if partitions && !split && t > 20 => {
                bus.partition(&[1], 1);
                split = true;
            }
            2 if partitions && split && t > 120 => {
                bus.heal();
                split = false;
            }
            3..=9 => {
                bus.step();
            }
            _ => {
                let k = rng.next(n as u64) as usize;
                if alive[k] {
                    let payload = format!("{}:{t}", k + 1).into_bytes();
                    groups[k].mcast(&payload).expect("alive member sends");
                }
            }
        }
        for (i, (g, l)) in groups.iter_mut().zip(&mut logs).enumerate() {
            if alive[i] {
                log(g, l);
            }
        }
    }
    if split {
        bus.heal();
    }
    bus.run_until_idle();
    for (i, (g, l)) in groups.iter_mut().zip(&mut logs).enumerate() {
        if alive[i] {
            log(g, l);
        }
    }
    (logs, bus.trace(), alive)
}

#[test]
fn virtual_synchrony_under_crashes() {
    for seed in seeds(300) {
        let (logs, trace, alive) = scenario(seed, false);
        let survivors: Vec<usize> = (0..logs.len()).filter(|&i| alive[i]).collect();
        let reference = &logs[survivors[0]];
        for &i in &survivors {
            assert_eq!(
                &logs[i],
                reference,
                "seed {seed}: node {} disagrees with node {}",
                i + 1,
                survivors[0] + 1
            );
        }
        // a crashed node saw a prefix of what the survivors saw
        for i in (0..logs.len()).filter(|&i| !alive[i]) {
            assert!(
                reference.starts_with(&logs[i]),
                "seed {seed}: crashed node {} saw a non-prefix",
                i + 1
            );
            let left: Vec<_> = reference
                .iter()
                .filter_map(|e| match e {
                    Event::ConfChg { left, .. } => Some(left.clone()),
                    _ => None,
                })
                .flatten()
                .collect();
            assert!(
                left.iter()
                    .any(|m| m.nodeid == i as u32 + 1 && m.reason == Reason::NodeDown),
                "seed {seed}: no NodeDown for the crashed node"
            );
        }
        // every survivor delivered exactly the trace, in its order
        let delivered: Vec<(u32, Vec<u8>)> = reference
            .iter()
            .filter_map(|e| match e {
                Event::Deliver {
                    nodeid, payload, ..
                } => Some((*nodeid, payload.clone())),
                _ => None,
            })
            .collect();
        let traced: Vec<(u32, Vec<u8>)> = trace.into_iter().map(|(_, n, p)| (n, p)).collect();
        assert_eq!(delivered, traced, "seed {seed}");
        // per-sender FIFO: each sender's messages arrive in the order it sent them
        for s in 1..=logs.len() as u32 {
            let ts: Vec<u32> = delivered
                .iter()
                .filter(|(n, _)| *n == s)
                .map(|(_, p)| {
                    let text = String::from_utf8(p.clone()).expect("utf8");
                    text.split(':')
                        .nth(1)
                        .and_then(|x| x.parse().ok())
                        .expect("t")
                })
                .collect();
            assert!(
                ts.windows(2).all(|w| w[0] < w[1]),
                "seed {seed}: sender {s} reordered"
            );
        }
    }
}

#[test]
fn partitions_are_seen_from_both_sides_and_merge_as_nodeup() {
    for seed in seeds(300).into_iter().take(100) {
        let (logs, _, _) = scenario(seed, true);
        let downs = |l: &Vec<Event>| {
            l.iter()
                .filter_map(|e| match e {
                    Event::ConfChg { left, joined, .. } => Some((
                        left.iter().filter(|m| m.reason == Reason::NodeDown).count(),
                        joined.iter().filter(|m| m.reason == Reason::NodeUp).count(),
                    )),
                    _ => None,
                })
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        };
        let (d1, u1) = downs(&logs[0]);
        let (d2, u2) = downs(&logs[1]);
        // node 1 is alone on its side: it loses every other member, they lose only node 1
        assert_eq!(
            d1, u1,
            "seed {seed}: node 1 did not get back everyone it lost"
        );
        assert_eq!(d2, u2, "seed {seed}");
        if d2 > 0 {
            assert_eq!(d1, d2 * (logs.len() - 1), "seed {seed}");
        }
        // the nodes that stayed together agree with each other
        for l in &logs[2..] {
            assert_eq!(l, &logs[1], "seed {seed}: the majority side disagrees");
        }
    }
}

#[test]
fn same_seed_same_trace() {
    for seed in [1u64, 7, 12345] {
        let a = scenario(seed, true);
        let b = scenario(seed, true);
        assert_eq!(a.0, b.0, "seed {seed}: logs differ between two runs");
        assert_eq!(a.1, b.1, "seed {seed}: traces differ between two runs");
    }
    assert_ne!(
        scenario(1, false).1,
        scenario(2, false).1,
        "the seed changes nothing"
    );
}

#[test]
fn leave_and_process_exit_reasons() {
    let bus = SimBus::new(9);
    let mut a = bus.join(1, NAME).expect("join");
    let mut b = bus.join(2, NAME).expect("join");
    let mut c = bus.join(3, NAME).expect("join");
    let mut la = Vec::new();
    log(&mut a, &mut la);
    b.leave();
    bus.kill_processes(3);
    let mut lb = Vec::new();
    log(&mut b, &mut lb);
    la.clear();
    log(&mut a, &mut la);
    let reasons: Vec<(u32, Reason)> = la
        .iter()
        .filter_map(|e| match e {
            Event::ConfChg { left, .. } => left.first().map(|m| (m.nodeid, m.reason)),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, vec![(2, Reason::Leave), (3, Reason::ProcDown)]);
    // the leaver sees its own leave last
    assert!(
        matches!(lb.last(), Some(Event::ConfChg { left, members, .. })
        if members.is_empty() && left[0].nodeid == 2 && left[0].reason == Reason::Leave)
    );
    assert!(b.mcast(b"x").is_err());
    assert!(c.mcast(b"x").is_err());
}
