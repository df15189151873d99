//! A plock storm on three real corosync nodes (our daemon on a fake kernel each): simulated
//! processes on every node lock and unlock random ranges of a few inodes as fast as the
//! cluster answers; node 3 is killed (daemon and corosync) mid-storm, then rebooted and
//! joins again while the storm goes on, receiving node 2's 100,000 other locks by state
//! transfer; finally the lockspace's members leave and rejoin
//! one after another, so that state received by transfer is passed on again. Checked from
//! outside: every request is answered exactly once, `dlm_tool plocks` prints the same table
//! on every node, no two conflicting locks are ever in it, node 3's locks went with it, and
//! the chain of re-joins loses no lock but the leavers' own (the C daemon loses a third of
//! them there).

#[path = "../../cpg/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dlm_proto::kernel::{PlockInfo, PlockOp};
use dlm_testkit::Rng;
use dlm_tests::foo_request;
use dlm_tests::{
    Daemon, FakeKernel, configfs_members, start_daemon_on_corosync, stdout_in_ns, writes,
};
use support::Cluster;

const T: Duration = Duration::from_secs(30);
const INODES: u64 = 4;
/// Locks node 2 holds besides the storm.
const BIG: u64 = 100_000;

fn request(rng: &mut Rng, node: u64) -> PlockInfo {
    let owner = node * 100 + rng.next(4);
    let start = rng.next(64);
    let end = start + rng.next(8);
    let op = if rng.next(3) == 0 {
        PlockOp::UNLOCK
    } else {
        PlockOp::LOCK
    };
    PlockInfo {
        ex: rng.next(2) == 0,
        ..foo_request(op, owner, rng.next(INODES), false, start, end)
    }
}

/// Runs requests on `k` in windows of 8 until `stop` or `limit`, returning (sent,
/// answered). Every reply must echo its request, in request order.
fn storm(k: &FakeKernel, node: u64, stop: &AtomicBool, limit: usize) -> (usize, usize) {
    let mut rng = Rng::from_state(0x9E37_79B9 ^ node);
    let (mut sent, mut answered) = (0, 0);
    while !stop.load(Ordering::Relaxed) && sent < limit {
        // a window of 8 requests in flight, answered in request order (kernel >= 6.5)
        let batch: Vec<PlockInfo> = (0..8).map(|_| request(&mut rng, node)).collect();
        for r in &batch {
            if k.send_plock(r).is_err() {
                return (sent, answered);
            }
            sent += 1;
        }
        for r in &batch {
            // none in time, or empty: the daemon closed the device (the counts tell)
            let Some(raw) = k.recv_plock_raw(T).filter(|b| !b.is_empty()) else {
                return (sent, answered);
            };
            let got = PlockInfo::decode(&raw).expect("a reply decodes");
            assert_eq!(
                (got.op, got.owner, got.number, got.start, got.end),
                (r.op, r.owner, r.number, r.start, r.end),
                "node {node}: replies out of order"
            );
            assert!(got.rv == 0 || got.rv == -11, "node {node}: {got:?}");
            answered += 1;
        }
    }
    (sent, answered)
}

/// One `dlm_tool plocks` line: (inode, exclusive, start, end, node, owner).
type Line = (u64, bool, u64, u64, u32, String);

fn parse(table: &str) -> Vec<Line> {
    table
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let (s, e) = w[2].split_once('-').expect("range");
            (
                w[0].parse().expect("inode"),
                w[1] == "WR",
                s.parse().expect("start"),
                e.parse().expect("end"),
                w[4].parse().expect("nodeid"),
                w[8].to_owned(),
            )
        })
        .collect()
}

/// No two locks of different owners overlap on one inode unless both are read locks.
fn assert_no_conflict(lines: &[Line]) {
    for (i, a) in lines.iter().enumerate() {
        for b in &lines[i + 1..] {
            let same_owner = a.4 == b.4 && a.5 == b.5;
            let overlap = a.0 == b.0 && a.2 <= b.3 && b.2 <= a.3;
            assert!(
                same_owner || !overlap || (!a.1 && !b.1),
                "conflicting locks granted: {a:?} and {b:?}"
            );
        }
    }
}

struct Storm {
    c: Cluster,
    base: PathBuf,
    kernels: Vec<Arc<FakeKernel>>,
    daemons: Vec<Option<Daemon>>,
}

impl Storm {
    /// Three corosync nodes named after `name`, our daemon on a fake kernel each (with
    /// `conf` as its dlm.conf when not empty), every one a member of lockspace `foo`.
    fn joined(name: &str, conf: &str) -> Self {
        let c = Cluster::start(name, 3);
        let base = std::env::temp_dir().join(format!("dlm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let kernels: Vec<Arc<FakeKernel>> = (1..=3)
            .map(|k| Arc::new(FakeKernel::start(&base.join(format!("n{k}"))).expect("kernel")))
            .collect();
        if !conf.is_empty() {
            for k in &kernels {
                let etc = k.root().join("etc/dlm");
                std::fs::create_dir_all(&etc).expect("etc/dlm");
                std::fs::write(etc.join("dlm.conf"), conf).expect("dlm.conf");
            }
        }
        let mut s = Self {
            c,
            base,
            kernels,
            daemons: vec![None, None, None],
        };
        for k in 1..=3 {
            s.start_daemon(k);
        }
        for k in 1..=3 {
            s.join(k);
        }
        s.wait_members(&[1, 2, 3], &[1, 2, 3]);
        s
    }

    fn start_daemon(&mut self, k: usize) {
        let d = start_daemon_on_corosync(
            &self.c.node_ns(k),
            Path::new(env!("CARGO_BIN_EXE_dlm_controld")),
            self.kernels[k - 1].root(),
            &self.kernels[k - 1],
            &[],
        )
        .unwrap_or_else(|| {
            let coro = self.c.dir.join(format!("n{k}/corosync.log"));
            let log = dlm_tests::daemon_logs(self.kernels[k - 1].root())
                + &std::fs::read_to_string(coro).unwrap_or_default();
            panic!(
                "daemon {k} did not come up; its log and corosync's end (newest first):\n{}",
                dlm_tests::newest_lines(&log, 60)
            )
        });
        self.daemons[k - 1] = Some(d);
    }

    /// `act` on node `k`'s kernel, then wait for the daemon's next `event_done` (a join or
    /// a leave completed).
    fn event_done_after(&self, k: usize, what: &str, act: impl FnOnce(&FakeKernel)) {
        let fk = &self.kernels[k - 1];
        let count = |r: &[dlm_tests::Record]| writes(r, "sys/kernel/dlm/foo/event_done").len();
        let before = count(&fk.records());
        act(fk);
        assert!(
            fk.wait_records(T, |r| count(r) > before),
            "node {k} did not {what}"
        );
    }

    fn join(&self, k: usize) {
        self.event_done_after(k, "join", |fk| {
            assert!(fk.announce("foo").expect("announce"));
        });
    }

    fn leave(&self, k: usize) {
        self.event_done_after(k, "leave", |fk| fk.release("foo").expect("release"));
        // the kernel removes the lockspace's sysfs directory once released
        let _ = std::fs::remove_dir_all(self.kernels[k - 1].root().join("sys/kernel/dlm/foo"));
    }

    /// This project's `dlm_tool plocks foo` on node `k` (the real one stops at 1 MiB).
    fn table(&self, k: usize) -> String {
        let ours = Path::new(env!("CARGO_BIN_EXE_dlm_controld")).with_file_name("dlm_tool");
        stdout_in_ns(
            &self.c.node_ns(k),
            &ours.display().to_string(),
            &["plocks", "foo"],
        )
    }

    /// The same table on every node of `nodes` (once quiet); returns it.
    fn same_table(&self, nodes: &[usize]) -> String {
        let end = Instant::now() + T;
        loop {
            let t: Vec<String> = nodes.iter().map(|&k| self.table(k)).collect();
            if t.iter().all(|x| x == &t[0]) {
                return t[0].clone();
            }
            assert!(Instant::now() < end, "tables differ: {t:#?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_members(&self, nodes: &[usize], members: &[u32]) {
        for &k in nodes {
            assert!(
                self.kernels[k - 1].wait_records(T, |r| configfs_members(r, "foo") == members),
                "node {k}: members {:?}; last records {:?}; log:\n{}",
                configfs_members(&self.kernels[k - 1].records(), "foo"),
                self.kernels[k - 1]
                    .records()
                    .iter()
                    .rev()
                    .take(8)
                    .collect::<Vec<_>>(),
                std::fs::read_to_string(
                    self.kernels[k - 1]
                        .root()
                        .join("var/log/dlm_controld/dlm_controld.log")
                )
                .unwrap_or_default()
            );
        }
    }
}

impl Drop for Storm {
    fn drop(&mut self) {
        self.daemons.clear();
        self.kernels.clear();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[test]
fn storm_with_a_node_killed_rebooted_and_a_chain_of_rejoins() {
    let mut s = Storm::joined("storm", "");
    // node 2 holds 100,000 locks on inodes of their own: node 3's rejoin below receives
    // them all by state transfer while the storm goes on
    let many = (0..BIG).map(|i| foo_request(PlockOp::LOCK, 7, 1000 + i, false, 0, 0));
    assert!(s.kernels[1].send_answered(many, 64, T), "the 100,000 locks");

    // the storm on all three nodes; node 3 dies in the middle of it
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (1..=3u64)
        .map(|node| {
            let k = s.kernels[usize::try_from(node).expect("small") - 1].clone();
            let stop = stop.clone();
            // node 3's processes finish before it dies; 1 and 2 go on until told to stop
            let limit = if node == 3 { 200 } else { usize::MAX };
            std::thread::spawn(move || storm(&k, node, &stop, limit))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    // the node dies: corosync first, so that the others see it go down (NODEDOWN). A daemon
    // killed while its corosync still runs is a daemon failure (PROCDOWN), which the
    // others answer by asking corosync to kill that node — a request that, delayed by the
    // storm, could reach node 3's next corosync, started a moment later, and end it.
    s.c.signal(3, libc::SIGKILL);
    s.daemons[2] = None;
    s.wait_members(&[1, 2], &[1, 2]);
    // node 3 reboots (fresh kernel) and joins while nodes 1 and 2 keep going
    s.c.start_node(3);
    s.kernels[2] = Arc::new(FakeKernel::start(&s.base.join("n3-rebooted")).expect("kernel"));
    s.start_daemon(3);
    s.join(3);
    s.wait_members(&[1, 2, 3], &[1, 2, 3]);
    // the storm goes on a little with all three members, then stops
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let results: Vec<(usize, usize)> = workers
        .into_iter()
        .map(|w| w.join().expect("storm thread"))
        .collect();
    assert_eq!(results[2], (200, 200), "node 3 before it died");
    for (i, (sent, answered)) in results.iter().enumerate().take(2) {
        assert_eq!(sent, answered, "node {}: a request was not answered", i + 1);
        assert!(*sent > 400, "node {}: only {sent} requests", i + 1);
    }
    let t = s.same_table(&[1, 2, 3]);
    let lines = parse(&t);
    let stormed: Vec<Line> = lines.iter().filter(|l| l.0 < INODES).cloned().collect();
    assert!(stormed.len() > 10, "the storm left locks: {t}");
    assert_eq!(
        lines.iter().filter(|l| l.0 >= 1000).count(),
        usize::try_from(BIG).expect("small"),
        "node 3 received the whole table"
    );
    assert!(
        !lines.iter().any(|l| l.4 == 3),
        "node 3's locks outlived it"
    );
    assert_no_conflict(&stormed);

    // node 3 (rebooted) takes locks of its own on a fresh inode
    let k3 = s.kernels[2].clone();
    for i in 0..30u64 {
        let r = PlockInfo {
            ex: i % 2 == 0,
            pid: 300,
            ..foo_request(PlockOp::LOCK, 300 + i % 3, 9, false, i * 10, i * 10 + 5)
        };
        k3.send_plock(&r).expect("send");
        let got = k3.recv_plock(T).expect("reply");
        assert_eq!(got.rv, 0);
    }
    let mut expect = parse(&s.same_table(&[1, 2, 3]));
    // a chain of re-joins: nodes 1 and 2 leave and join again in turn, so each receives
    // the state from the other, which had itself received it by transfer (C loses locks
    // here, plock-spec §5.4); a leaver's own locks go with it, everything else stays
    for k in [1, 2, 1, 2] {
        s.leave(k);
        s.join(k);
        s.wait_members(&[1, 2, 3], &[1, 2, 3]);
        let node = u32::try_from(k).expect("small");
        expect.retain(|l| l.4 != node);
        let now = parse(&s.same_table(&[1, 2, 3]));
        assert_eq!(now, expect, "after node {k} re-joined");
    }
    assert_eq!(expect.iter().filter(|l| l.0 == 9 && l.4 == 3).count(), 30);
    assert!(
        expect.iter().all(|l| l.0 < 1000),
        "node 2 re-joined last: its 100,000 locks went with it"
    );
}

/// A C-compatible lockspace (`plock_native=0`: every request a CPG message, decided at
/// its delivery) under the storm on all three nodes: every request answered, in order,
/// and one table on every node. Each node's deliveries are handled by its lockspace task
/// and, at the end of a turn of requests, by the device's reader on its own thread; an
/// event taken by one and handled after the other had handled later ones made the
/// tables differ (found by `vs_c3`'s contended C-compatible case).
#[test]
fn a_c_compatible_storm_keeps_one_table() {
    let s = Storm::joined("stormc", "plock_native=0\n");
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (1..=3u64)
        .map(|node| {
            let k = s.kernels[usize::try_from(node).expect("small") - 1].clone();
            let stop = stop.clone();
            std::thread::spawn(move || storm(&k, node, &stop, usize::MAX))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    for (i, w) in workers.into_iter().enumerate() {
        let (sent, answered) = w.join().expect("storm thread");
        assert_eq!(sent, answered, "node {}: a request was not answered", i + 1);
        assert!(sent > 200, "node {}: only {sent} requests", i + 1);
    }
    let t = s.same_table(&[1, 2, 3]);
    let lines = parse(&t);
    assert!(lines.len() > 10, "the storm left locks: {t}");
    assert_no_conflict(&lines);
}
