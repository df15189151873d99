//! Three daemons on three real corosync nodes (network namespaces), each on its own fake
//! kernel: a lockspace joined on all three starts with all three members on every node;
//! when node 3 dies (daemon and corosync killed) the survivors stop the lockspace and start
//! it again without node 3. These run with `enable_fencing=0`; fencing on real corosync is
//! in `fencing_cluster.rs`.

#[path = "../../cpg/tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use dlm_proto::kernel::{PlockInfo, PlockOp};
use dlm_tests::foo_request as req;
use dlm_tests::{
    Daemon, FakeKernel, Record, configfs_members, metric_in_ns, start_daemon_on_corosync, writes,
};
use support::Cluster;

const T: Duration = Duration::from_secs(30);
const C: &str = "sys/kernel/config/dlm/cluster";

fn members(records: &[Record]) -> Vec<u32> {
    configfs_members(records, "foo")
}

/// Three corosync nodes, a fake kernel and a daemon on each.
fn start_all(tag: &str) -> (Cluster, PathBuf, Vec<FakeKernel>, Vec<Daemon>) {
    start_all_with(tag, "")
}

/// The same with `dlm_conf` as every node's /etc/dlm/dlm.conf.
fn start_all_with(tag: &str, dlm_conf: &str) -> (Cluster, PathBuf, Vec<FakeKernel>, Vec<Daemon>) {
    let c = Cluster::start(tag, 3);
    let base = std::env::temp_dir().join(format!("dlm-daemon-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let roots: Vec<PathBuf> = (1..=3).map(|k| base.join(format!("n{k}"))).collect();
    let kernels: Vec<FakeKernel> = roots
        .iter()
        .map(|r| FakeKernel::start(r).expect("fake kernel"))
        .collect();
    for r in &roots {
        let etc = r.join("etc/dlm");
        std::fs::create_dir_all(&etc).expect("etc/dlm");
        std::fs::write(etc.join("dlm.conf"), dlm_conf).expect("dlm.conf");
    }
    let daemons = (1..=3)
        .map(|k| {
            start_daemon_on_corosync(
                &c.node_ns(k),
                std::path::Path::new(env!("CARGO_BIN_EXE_dlm_controld")),
                &roots[k - 1],
                &kernels[k - 1],
                &[],
            )
            .unwrap_or_else(|| panic!("daemon {k} did not come up"))
        })
        .collect();
    (c, base, kernels, daemons)
}

#[test]
fn three_daemons_join_and_survive_a_node_failure() {
    let (mut c, base, kernels, mut daemons) = start_all("dmn");
    // every daemon wrote a comms entry for every node, local only for itself
    for (i, k) in kernels.iter().enumerate() {
        let node = i + 1;
        assert!(
            k.wait_records(T, |r| (1..=3).all(|n| !writes(
                r,
                &format!("{C}/comms/{n}/nodeid")
            )
            .is_empty())),
            "node {node}: comms entries {:?}",
            k.records()
        );
        let r = k.records();
        for n in 1..=3 {
            let mut addr = vec![0u8; 128];
            addr[..8].copy_from_slice(&[2, 0, 0, 0, 127, 100, 0, u8::try_from(n).expect("small")]);
            assert_eq!(
                writes(&r, &format!("{C}/comms/{n}/addr")),
                vec![addr],
                "node {node} addr of {n}"
            );
            let local = writes(&r, &format!("{C}/comms/{n}/local"));
            assert_eq!(
                local.is_empty(),
                n != node,
                "node {node}: local flag of {n}"
            );
        }
    }
    // join on all three, one after another
    for k in &kernels {
        assert!(k.announce("foo").expect("announce"));
        assert!(
            k.wait_records(T, |r| !writes(r, "sys/kernel/dlm/foo/event_done")
                .is_empty()),
            "join did not complete: {:?}",
            k.records()
        );
    }
    for (i, k) in kernels.iter().enumerate() {
        assert!(
            k.wait_records(T, |r| members(r) == vec![1, 2, 3]),
            "node {}: members {:?}",
            i + 1,
            members(&k.records())
        );
        assert_eq!(
            writes(&k.records(), "sys/kernel/dlm/foo/id"),
            vec![b"1826763677\0".to_vec()]
        );
    }
    // node 3 dies: daemon and corosync killed
    drop(daemons.pop());
    c.signal(3, libc::SIGKILL);
    for (i, k) in kernels[..2].iter().enumerate() {
        // stopped at the failure, started again with nodes 1 and 2 only
        let restarted = |r: &[Record]| {
            members(r) == vec![1, 2]
                && writes(r, "sys/kernel/dlm/foo/control")
                    .concat()
                    .ends_with(b"1\x000\x001\x00")
        };
        assert!(
            k.wait_records(T, restarted),
            "node {}: members {:?}, control {:?}",
            i + 1,
            members(&k.records()),
            writes(&k.records(), "sys/kernel/dlm/foo/control")
        );
    }
    drop(daemons);
    drop(kernels);
    let _ = std::fs::remove_dir_all(&base);
}

fn reply(k: &FakeKernel) -> PlockInfo {
    k.recv_plock(T).expect("a reply")
}

fn join(k: &FakeKernel) {
    assert!(k.announce("foo").expect("announce"));
    assert!(k.wait_records(T, |r| {
        !writes(r, "sys/kernel/dlm/foo/event_done").is_empty()
    }));
}

/// Plocks conflict across nodes, a waiter on one node is granted by an unlock on another,
/// and a node that joins later receives the whole table (state transfer).
#[test]
fn plocks_across_nodes_and_state_transfer() {
    let (c, base, kernels, daemons) = start_all("plk");
    join(&kernels[0]);
    join(&kernels[1]);
    assert!(kernels[1].wait_records(T, |r| members(r) == vec![1, 2]));
    let (k1, k2, k3) = (&kernels[0], &kernels[1], &kernels[2]);
    k1.send_plock(&req(PlockOp::LOCK, 7, 5, false, 0, 9))
        .expect("send");
    assert_eq!(reply(k1).rv, 0);
    // same owner value on another node is another owner: it conflicts
    k2.send_plock(&req(PlockOp::LOCK, 7, 5, false, 5, 5))
        .expect("send");
    assert_eq!(reply(k2).rv, -11);
    k2.send_plock(&req(PlockOp::LOCK, 8, 5, true, 5, 5))
        .expect("send");
    std::thread::sleep(Duration::from_millis(1100));
    let age = metric_in_ns(
        &c.node_ns(2),
        "dlm_plock_oldest_waiter_seconds{lockspace=\"foo\"}",
    );
    assert!(age >= 1.0, "node 2's waiter has waited {age} s");
    for n in 100..150u64 {
        k1.send_plock(&req(PlockOp::LOCK, 9, n, false, n, n + 1))
            .expect("send");
        assert_eq!(reply(k1).rv, 0);
    }
    // node 3 joins now and must receive node 1's locks and node 2's waiter
    join(k3);
    assert!(k3.wait_records(T, |r| members(r) == vec![1, 2, 3]));
    k3.send_plock(&req(PlockOp::GET, 1, 5, false, 0, 100))
        .expect("send");
    let g = reply(k3);
    assert_eq!(
        (g.rv, g.start, g.end),
        (1, 0, 9),
        "node 3 does not see node 1's lock"
    );
    k3.send_plock(&req(PlockOp::GET, 1, 123, false, 0, 1000))
        .expect("send");
    let g = reply(k3);
    assert_eq!((g.rv, g.start, g.end), (1, 123, 124));
    // node 1 (the lowest with the state) sent it twice (an empty table to node 2, then
    // 51 resources to node 3); node 3 received it once
    let m = |k: usize, s: &str| metric_in_ns(&c.node_ns(k), s);
    let sent = "dlm_plock_transfers_total{lockspace=\"foo\",role=\"sent\"}";
    assert_eq!(m(1, sent), 2.0);
    let sent = "dlm_plock_transfer_messages_total{lockspace=\"foo\",role=\"sent\"}";
    assert_eq!(m(1, sent), 51.0);
    assert_eq!(
        m(
            3,
            "dlm_plock_transfers_total{lockspace=\"foo\",role=\"received\"}"
        ),
        1.0
    );
    assert_eq!(
        m(
            3,
            "dlm_plock_transfer_messages_total{lockspace=\"foo\",role=\"received\"}"
        ),
        51.0
    );
    assert_eq!(
        m(3, "dlm_plock_transfer_seconds_count{lockspace=\"foo\"}"),
        1.0
    );
    // node 1 unlocks: node 2's waiter is granted on node 2, and node 3 agrees
    k1.send_plock(&req(PlockOp::UNLOCK, 7, 5, false, 0, 9))
        .expect("send");
    assert_eq!(reply(k1).rv, 0);
    let w = reply(k2);
    assert_eq!((w.op, w.wait, w.rv, w.owner), (PlockOp::LOCK, true, 0, 8));
    k3.send_plock(&req(PlockOp::GET, 1, 5, false, 0, 100))
        .expect("send");
    let g = reply(k3);
    assert_eq!(
        (g.rv, g.start, g.end, g.pid),
        (1, 5, 5, 8),
        "node 3 missed the waiter"
    );
    crosswise_deadlock_is_shown_on_any_node(&c, k1, k2);
    drop(daemons);
    drop(kernels);
    let _ = std::fs::remove_dir_all(&base);
}

/// This build's dlm_tool, beside the test binaries' directory.
fn our_dlm_tool() -> PathBuf {
    std::env::current_exe()
        .expect("test path")
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target dir")
        .join("dlm_tool")
}

/// Native mode with `plock_native_sync_ms=0` (no periodic sync): node 1 decides a file
/// only it uses without CPG, and a plock dump on node 2 still shows every lock of it at
/// once — the dump's SYNC has node 1 send its STATEs first; node 1 keeps deciding locally.
#[test]
fn a_dump_on_any_node_shows_what_another_decides() {
    let (c, base, kernels, daemons) = start_all_with("frs", "plock_native_sync_ms=0\n");
    join(&kernels[0]);
    join(&kernels[1]);
    assert!(kernels[1].wait_records(T, |r| members(r) == vec![1, 2]));
    let k1 = &kernels[0];
    let m = |k: usize, s: &str| metric_in_ns(&c.node_ns(k), s);
    let local = "dlm_plock_local_total{lockspace=\"foo\"}";
    // the first request claims inode 40 through CPG; the next ones are decided on node 1
    for (start, end) in [(0, 9), (20, 29), (40, 49)] {
        k1.send_plock(&req(PlockOp::LOCK, 7, 40, false, start, end))
            .expect("send");
        assert_eq!(reply(k1).rv, 0);
    }
    k1.send_plock(&req(PlockOp::UNLOCK, 7, 40, false, 20, 29))
        .expect("send");
    assert_eq!(reply(k1).rv, 0);
    assert_eq!(m(1, local), 3.0, "node 1 decided the last three itself");
    let ours = our_dlm_tool();
    let out = Command::new("ip")
        .args(["netns", "exec", &c.node_ns(2)])
        .arg(&ours)
        .args(["plocks", "foo"])
        .output()
        .expect("dlm_tool");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("40 ")).collect();
    assert_eq!(
        lines,
        [
            "40 WR 0-9 nodeid 1 pid 7 owner 7 rown 0",
            "40 WR 40-49 nodeid 1 pid 7 owner 7 rown 0"
        ],
        "node 2's dump: {text}"
    );
    // the dump recalled nothing: node 1 still decides the file
    assert_eq!(m(1, "dlm_plock_recalls_total{lockspace=\"foo\"}"), 0.0);
    k1.send_plock(&req(PlockOp::UNLOCK, 7, 40, false, 0, 49))
        .expect("send");
    assert_eq!(reply(k1).rv, 0);
    assert_eq!(m(1, local), 4.0);
    drop(daemons);
    drop(kernels);
    let _ = std::fs::remove_dir_all(&base);
}

/// Two processes on two nodes lock crosswise (each holds one inode and waits for the
/// other's): both wait, and `dlm_tool plocks --waits` on the third node shows the cycle
/// with both pids (issue 17).
fn crosswise_deadlock_is_shown_on_any_node(c: &Cluster, k1: &FakeKernel, k2: &FakeKernel) {
    hold_crosswise(k1, k2);
    k2.send_plock(&req(PlockOp::LOCK, 32, 20, true, 0, 0))
        .expect("send");
    let ours = our_dlm_tool();
    let end = std::time::Instant::now() + T;
    let text = loop {
        let out = Command::new("ip")
            .args(["netns", "exec", &c.node_ns(3)])
            .arg(&ours)
            .args(["plocks", "--waits", "foo"])
            .output()
            .expect("dlm_tool");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("2 owners in a cycle") || std::time::Instant::now() > end {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(text.contains(", 2 owners in a cycle"), "{text}");
    for (inode, pid, blocker) in [(21, 31, 32), (20, 32, 31)] {
        let waiter = format!(
            "{inode} WR 0-0 nodeid {} pid {pid} owner {pid:x} waiting",
            pid - 30
        );
        let line = text
            .lines()
            .find(|l| l.starts_with(&waiter))
            .unwrap_or_else(|| panic!("no waiter {waiter}: {text}"));
        assert!(line.ends_with("DEADLOCK (cycle)"), "{line}");
        assert!(
            text.contains(&format!(
                "blocked by {inode} WR 0-0 nodeid {} pid {blocker}",
                blocker - 30
            )),
            "{text}"
        );
    }
    // counted on the lockspace's once-a-second poll
    let cycle = "dlm_plock_owners_in_cycle{lockspace=\"foo\"}";
    let end = std::time::Instant::now() + T;
    while metric_in_ns(&c.node_ns(3), cycle) != 2.0 && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(metric_in_ns(&c.node_ns(3), cycle), 2.0);
    // neither is answered: without deadlock detection both wait
    assert!(k1.recv_plock_raw(Duration::from_millis(300)).is_none());
    assert!(k2.recv_plock_raw(Duration::from_millis(300)).is_none());
}

/// Owner 31 on node 1 holds inode 20, owner 32 on node 2 inode 21, and owner 31 asks for
/// inode 21 (it waits); owner 32 asking for inode 20 next closes the cycle.
fn hold_crosswise(k1: &FakeKernel, k2: &FakeKernel) {
    k1.send_plock(&req(PlockOp::LOCK, 31, 20, false, 0, 0))
        .expect("send");
    assert_eq!(reply(k1).rv, 0);
    k2.send_plock(&req(PlockOp::LOCK, 32, 21, false, 0, 0))
        .expect("send");
    assert_eq!(reply(k2).rv, 0);
    k1.send_plock(&req(PlockOp::LOCK, 31, 21, true, 0, 0))
        .expect("send");
}

/// With `plock_deadlock_detect=1` on every node, the F_SETLKW that would close a cycle
/// of owners on two nodes is answered EDEADLK (the other still waits), on any node's
/// request, and no table holds the refused waiter (issue 17).
#[test]
fn deadlock_detection_refuses_the_request_that_closes_a_cycle() {
    let (c, base, kernels, daemons) = start_all_with("ddl", "plock_deadlock_detect=1\n");
    for k in &kernels {
        join(k);
    }
    assert!(kernels[2].wait_records(T, |r| members(r) == vec![1, 2, 3]));
    let (k1, k2) = (&kernels[0], &kernels[1]);
    hold_crosswise(k1, k2);
    // node 1's request waits; node 2's would close the cycle
    std::thread::sleep(Duration::from_millis(300));
    k2.send_plock(&req(PlockOp::LOCK, 32, 20, true, 0, 0))
        .expect("send");
    let r = reply(k2);
    assert_eq!((r.op, r.number, r.rv), (PlockOp::LOCK, 20, -35), "EDEADLK");
    assert!(k1.recv_plock_raw(Duration::from_millis(300)).is_none());
    // node 2 gives up its lock: node 1's waiter is granted
    k2.send_plock(&req(PlockOp::UNLOCK, 32, 21, false, 0, 0))
        .expect("send");
    assert_eq!(reply(k2).rv, 0);
    let w = reply(k1);
    assert_eq!((w.number, w.wait, w.rv), (21, true, 0));
    let cycle = "dlm_plock_owners_in_cycle{lockspace=\"foo\"}";
    assert_eq!(metric_in_ns(&c.node_ns(3), cycle), 0.0);
    drop(daemons);
    drop(kernels);
    let _ = std::fs::remove_dir_all(&base);
}

/// A node cut off into a minority partition purges the others at its membership change,
/// but without quorum it must not grant anything: its waiter, blocked by a node it can no
/// longer see, stays blocked (C would grant it at once).
#[test]
fn minority_partition_grants_nothing() {
    let (mut c, base, kernels, daemons) = start_all("min");
    for k in &kernels {
        join(k);
    }
    assert!(kernels[0].wait_records(T, |r| members(r) == vec![1, 2, 3]));
    let (k1, k3) = (&kernels[0], &kernels[2]);
    k3.send_plock(&req(PlockOp::LOCK, 3, 5, false, 0, 9))
        .expect("send");
    assert_eq!(reply(k3).rv, 0);
    k1.send_plock(&req(PlockOp::LOCK, 1, 5, true, 0, 9))
        .expect("send");
    assert!(k1.recv_plock_raw(Duration::from_millis(300)).is_none());
    // cut node 1 off: it sees nodes 2 and 3 go and stops the lockspace
    c.link(1, false);
    let stopped = |r: &[Record]| {
        writes(r, "sys/kernel/dlm/foo/control")
            .concat()
            .ends_with(b"1\x000\x00")
    };
    assert!(
        k1.wait_records(T, stopped),
        "node 1 never stopped: {:?}",
        writes(&k1.records(), "sys/kernel/dlm/foo/control")
    );
    // it purged node 3's lock at its change, but holds the grant while it has no quorum
    let got = k1
        .recv_plock_raw(Duration::from_secs(3))
        .map(|r| PlockInfo::decode(&r));
    assert!(
        got.is_none(),
        "a minority partition granted a lock the majority may grant too: {got:?}; control {:?}",
        writes(&k1.records(), "sys/kernel/dlm/foo/control")
    );
    // what an operator (or Pacemaker's agent) sees on node 1: the real dlm_tool and ours
    // print the same pending change waiting for quorum; ours exits 4 with --exit-code
    let tool = |bin: &str, args: &[&str]| {
        let out = Command::new("ip")
            .args(["netns", "exec", &c.node_ns(1), bin])
            .args(args)
            .output()
            .expect("dlm_tool");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.status.code(),
        )
    };
    let ours = std::env::current_exe()
        .expect("test path")
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target dir")
        .join("dlm_tool")
        .display()
        .to_string();
    let (real, _) = tool("dlm_tool", &["ls"]);
    assert!(real.contains("\nnew status    wait quorum\n"), "{real}");
    let (mine, code) = tool(&ours, &["ls"]);
    assert_eq!((mine.as_str(), code), (real.as_str(), Some(0)));
    let (_, code) = tool(&ours, &["ls", "--exit-code"]);
    assert_eq!(code, Some(4), "waiting for quorum");
    // the link heals: node 1 comes back having run the lockspace while apart (a stateful
    // merge); the quorate majority has corosync remove it from the cluster, as C does
    c.link(1, true);
    assert!(
        c.exits_within(1, T),
        "node 1's corosync was not told to leave after the merge"
    );
    drop(daemons);
    drop(kernels);
    drop(c);
    let _ = std::fs::remove_dir_all(&base);
}

/// A lockspace member whose daemon dies while its corosync runs on (CPG reason PROCDOWN) is
/// removed from the cluster, as C's `kick_node_from_cluster` does: its kernel would
/// otherwise stay in the lockspace with nobody to answer for it. With fencing off (here),
/// nothing else would.
#[test]
fn a_member_whose_daemon_dies_is_removed_from_the_cluster() {
    let (mut c, base, kernels, mut daemons) = start_all("kick");
    for k in &kernels {
        join(k);
    }
    for k in &kernels {
        assert!(k.wait_records(T, |r| members(r) == vec![1, 2, 3]));
    }
    drop(daemons.pop());
    assert!(
        c.exits_within(3, T),
        "node 3's corosync was not told to leave after its daemon died"
    );
    drop(daemons);
    drop(kernels);
    let _ = std::fs::remove_dir_all(&base);
}
