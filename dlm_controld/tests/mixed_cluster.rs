//! A rolling upgrade: three real corosync nodes, our daemon on nodes 1 and 2, Debian's C
//! `dlm_controld` 4.2.0 on node 3 (on its own fake kernel, through the LD_PRELOAD shim in
//! `tests/shim/`). They negotiate the daemon protocol, join one lockspace with the same
//! members everywhere, and share one plock table: locks taken on one kind of daemon block
//! and are granted across to the other, `dlm_tool plocks` prints the same table on every
//! node, a node joining later receives the table by state transfer from the other kind,
//! and a failed node is fenced by either kind with the other waiting for its result.

#[path = "../../cpg/tests/support/mod.rs"]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dlm_proto::kernel::{PlockInfo, PlockOp};
use dlm_tests::foo_request as req;
use dlm_tests::{
    Daemon, FakeKernel, Record, build_shim, configfs_members, control_writes, daemon_logs,
    newest_lines, settle_post_join_delay, start_c_daemon, start_daemon_on_corosync, stdout_in_ns,
};
use support::Cluster;

const T: Duration = Duration::from_secs(30);

const AGENT: &str = "#!/bin/sh
input=$(cat)
log=$(printf '%s\\n' \"$input\" | sed -n 's/^log=//p')
printf '%s\\n' \"$input\" >> \"$log\"
";

fn reply(k: &FakeKernel) -> PlockInfo {
    k.recv_plock(T).expect("a reply")
}

/// A fake kernel under `root` whose dlm.conf fences every node with the test agent.
fn kernel_at(base: &Path, root: &Path) -> FakeKernel {
    std::fs::create_dir_all(root.join("etc/dlm")).expect("etc");
    std::fs::write(
        root.join("etc/dlm/dlm.conf"),
        format!(
            "fence_all {} log={}\n",
            base.join("agent.sh").display(),
            base.join("fenced").display()
        ),
    )
    .expect("dlm.conf");
    FakeKernel::start(root).expect("fake kernel")
}

struct Mixed {
    c: Cluster,
    base: PathBuf,
    shim: PathBuf,
    kernels: Vec<FakeKernel>,
    daemons: Vec<Option<Daemon>>,
    /// `-j` for the next daemon started: the default until [`Mixed::settle`], then 1.
    post_join_delay: &'static str,
}

impl Mixed {
    /// Three corosync nodes and a fake kernel each; no daemons yet.
    fn new(tag: &str) -> Self {
        let c = Cluster::start(tag, 3);
        let base = std::env::temp_dir().join(format!("dlm-mixed-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).expect("base");
        let shim = build_shim(&base).expect("the LD_PRELOAD shim builds");
        let agent = base.join("agent.sh");
        std::fs::write(&agent, AGENT).expect("agent");
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let kernels = (1..=3)
            .map(|k| kernel_at(&base, &base.join(format!("n{k}"))))
            .collect();
        Self {
            c,
            base,
            shim,
            kernels,
            daemons: vec![None, None, None],
            post_join_delay: "30",
        }
    }

    fn start_ours(&mut self, k: usize) {
        let d = start_daemon_on_corosync(
            &self.c.node_ns(k),
            Path::new(env!("CARGO_BIN_EXE_dlm_controld")),
            self.kernels[k - 1].root(),
            &self.kernels[k - 1],
            &["-f", "1", "-j", self.post_join_delay],
        )
        .unwrap_or_else(|| panic!("our daemon {k} did not come up"));
        self.daemons[k - 1] = Some(d);
    }

    /// What node `k` logged: its daemon (C or ours, with what ours wrote to stderr), the
    /// end of its corosync's log, the fencing log and the end of the other daemons' logs.
    fn story(&self, k: usize) -> String {
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        let logs = |n: usize| read(self.c_log(n)) + &daemon_logs(self.kernels[n - 1].root());
        let coro = read(self.c.dir.join(format!("n{k}/corosync.log")));
        let others: String = (1..=3)
            .filter(|&n| n != k)
            .map(|n| {
                format!(
                    "node {n}'s daemon (newest first):\n{}\n",
                    newest_lines(&logs(n), 30)
                )
            })
            .collect();
        format!(
            "daemon:\n{}\ncorosync (newest first):\n{}\nfencing:\n{}\n{others}",
            logs(k),
            newest_lines(&coro, 30),
            read(self.base.join("fenced")),
        )
    }

    fn c_log(&self, k: usize) -> PathBuf {
        self.base.join(format!("c-daemon-{k}.log"))
    }

    fn start_c(&mut self, k: usize) {
        let d = start_c_daemon(
            &self.c.node_ns(k),
            &self.shim,
            &self.kernels[k - 1],
            &["-f", "1", "-j", self.post_join_delay],
            &self.c_log(k),
        )
        .unwrap_or_else(|| {
            panic!(
                "the C daemon on node {k} did not come up:\n{}",
                std::fs::read_to_string(self.c_log(k)).unwrap_or_default()
            )
        });
        self.daemons[k - 1] = Some(d);
    }

    /// The three daemons, started one after the other with the default
    /// `post_join_delay` (a slow start is not fenced at startup), are members everywhere:
    /// the delay becomes 1 s on each, and on the daemons started from now on.
    fn settle(&mut self) {
        let nss: Vec<String> = (1..=3).map(|k| self.c.node_ns(k)).collect();
        assert!(
            settle_post_join_delay(&nss, 1, T),
            "post_join_delay not set:\n{}",
            self.story(1)
        );
        self.post_join_delay = "1";
    }

    /// Node `k` is gone for good: its corosync and daemon killed, corosync first (the
    /// others see the node go down; a daemon dying alone is PROCDOWN, and the kill request
    /// they answer it with could reach the node's next corosync after a reboot).
    fn kill(&mut self, k: usize) {
        self.c.signal(k, libc::SIGKILL);
        self.daemons[k - 1] = None;
    }

    /// Node `k` reboots: corosync again and a fresh fake kernel.
    fn reboot(&mut self, k: usize) {
        self.c.start_node(k);
        let root = self.base.join(format!("n{k}-rebooted"));
        self.kernels[k - 1] = kernel_at(&self.base, &root);
    }

    /// Why a fencing count is off: the agents' log and the C daemon's (node `c`).
    fn fence_story(&self, c: usize) -> String {
        format!(
            "agents:\n{}\nC daemon on node {c}:\n{}",
            std::fs::read_to_string(self.base.join("fenced")).unwrap_or_default(),
            std::fs::read_to_string(self.c_log(c)).unwrap_or_default()
        )
    }

    fn fenced(&self, node: u32) -> usize {
        std::fs::read_to_string(self.base.join("fenced"))
            .unwrap_or_default()
            .matches(&format!("node={node}\n"))
            .count()
    }

    /// Members `members` restarted the lockspace on each of `nodes`.
    fn wait_restarted(&self, nodes: &[usize], members: &[u32]) {
        for &k in nodes {
            let fk = &self.kernels[k - 1];
            let done = |r: &[Record]| {
                configfs_members(r, "foo") == members
                    && control_writes(r, "foo").ends_with(b"1\x000\x001\x00")
            };
            assert!(
                fk.wait_records(T, done),
                "node {k}: members {:?} control {:?}",
                configfs_members(&fk.records(), "foo"),
                control_writes(&fk.records(), "foo"),
            );
        }
    }

    fn join(&self, k: usize) {
        let fk = &self.kernels[k - 1];
        let sent = fk
            .announce("foo")
            .unwrap_or_else(|e| panic!("node {k}: announce: {e}\n{}", self.story(k)));
        assert!(sent, "node {k}: no daemon listens for uevents");
        assert!(
            fk.wait_joined("foo", T),
            "node {k} did not join: {:?}\n{}",
            fk.records(),
            self.story(k)
        );
    }

    fn wait_members(&self, nodes: &[usize], members: &[u32]) {
        for &k in nodes {
            let fk = &self.kernels[k - 1];
            assert!(
                fk.wait_records(T, |r| configfs_members(r, "foo") == members),
                "node {k}: members {:?}, want {members:?}\n{}",
                configfs_members(&fk.records(), "foo"),
                std::fs::read_to_string(self.c_log(3)).unwrap_or_default()
            );
        }
    }

    /// The real dlm_tool on node `k`.
    fn dlm_tool(&self, k: usize, args: &[&str]) -> String {
        stdout_in_ns(&self.c.node_ns(k), "dlm_tool", args)
    }

    /// `dlm_tool plocks foo` on every node in `nodes` prints the same non-empty table;
    /// returns it.
    fn same_table(&self, nodes: &[usize]) -> String {
        let end = Instant::now() + T;
        loop {
            let t: Vec<String> = nodes
                .iter()
                .map(|&k| self.dlm_tool(k, &["plocks", "foo"]))
                .collect();
            if t.iter().all(|x| x == &t[0]) && !t[0].is_empty() {
                return t[0].clone();
            }
            assert!(Instant::now() < end, "tables differ: {t:#?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Mixed {
    fn drop(&mut self) {
        self.daemons.clear();
        self.kernels.clear();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[test]
fn c_and_rust_daemons_share_lockspaces_plocks_and_fencing() {
    let mut m = Mixed::new("mix");
    m.start_ours(1);
    m.start_ours(2);
    m.start_c(3);
    m.settle();
    for k in 1..=3 {
        m.join(k);
    }
    m.wait_members(&[1, 2, 3], &[1, 2, 3]);
    // every node wrote the same lockspace id to sysfs
    for fk in &m.kernels {
        let ids: Vec<Vec<u8>> = fk
            .records()
            .into_iter()
            .filter_map(|r| match r {
                Record::Write(p, b) if p == "sys/kernel/dlm/foo/id" => Some(b),
                _ => None,
            })
            .collect();
        assert_eq!(ids, vec![b"1826763677\0".to_vec()]);
    }

    // the C node takes a write lock; ours on node 1 is refused, then waits
    let (k1, k2, k3) = (&m.kernels[0], &m.kernels[1], &m.kernels[2]);
    k3.send_plock(&req(PlockOp::LOCK, 33, 7, false, 0, 99))
        .expect("send");
    assert_eq!(reply(k3).rv, 0, "the C daemon grants a free range");
    k1.send_plock(&req(PlockOp::LOCK, 11, 7, false, 50, 59))
        .expect("send");
    assert_eq!(reply(k1).rv, -11, "ours sees the C daemon's lock");
    k1.send_plock(&req(PlockOp::LOCK, 11, 7, true, 50, 59))
        .expect("send");
    assert!(k1.recv_plock_raw(Duration::from_millis(500)).is_none());
    // a kernel >= 6.6 cancels the wait: with a C 4.x member the lockspace treats CANCEL
    // as C does (-EINVAL, the waiter stays) on every node, so the replicas stay equal
    k1.send_plock(&req(PlockOp::CANCEL, 11, 7, false, 50, 59))
        .expect("send");
    let r = reply(k1);
    assert_eq!((r.op, r.rv), (PlockOp::CANCEL, -22), "{r:?}");
    // and never reaches the C daemon (a C 4.3 would apply it while our kernel waits on)
    let log = m.dlm_tool(3, &["log_plock"]);
    // the plock log holds C's lines of a lockspace start too: ours joined as node 2 (change
    // 2) as C's node 3 joined (change 3), with node 1 the data node both times
    let joined = |log: &str| -> Vec<String> {
        log.lines()
            .filter_map(|l| l.splitn(3, ' ').nth(2))
            .filter(|l| {
                !["read plock", "receive plock", "save plock"]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .take(7)
            // how many requests were saved meanwhile depends on timing
            .map(|l| match l.strip_prefix("process_saved_plocks ") {
                Some(rest) if rest.ends_with(" done") => "process_saved_plocks _ done".into(),
                _ => l.to_owned(),
            })
            .collect()
    };
    let like_c = |seq: u32| -> Vec<String> {
        vec![
            "prepare_plocks".into(),
            "set_plock_data_node from 0 to 1".into(),
            "save_plocks start".into(),
            format!("receive_plocks_done 1:{seq} flags 2 plocks_data 0 need 1 save 1"),
            "process_saved_plocks begin".into(),
            "process_saved_plocks _ done".into(),
            format!("receive_plocks_done 1:{seq} plocks_data_count 0"),
        ]
    };
    assert_eq!(joined(&log), like_c(3), "C's own lines: {log}");
    let ours = m.dlm_tool(2, &["log_plock"]);
    assert_eq!(joined(&ours), like_c(2), "ours: {ours}");
    // and the data node's: C's send_all_plocks_data / send_plocks_done for each joiner
    let ours = m.dlm_tool(1, &["log_plock"]);
    for seq in [2, 3] {
        for want in [
            format!(" foo send_all_plocks_data 1:{seq}\n"),
            format!(" foo send_plocks_done 1:{seq} counts {seq} {seq} 1 0 0 plocks_data 0\n"),
        ] {
            assert!(ours.contains(&want), "{want} in {ours}");
        }
    }
    assert!(log.contains("receive plock 7 LK WR 32-3b"), "{log}");
    assert!(!log.contains("receive plock 7 ??"), "{log}");
    // ours logs the delivery as C does, on a node that did not send it
    let ours = m.dlm_tool(2, &["log_plock"]);
    assert!(ours.contains("receive plock 7 LK WR 32-3b"), "{ours}");
    // ours on node 2 holds another range; GET on the C node finds it
    k2.send_plock(&req(PlockOp::LOCK, 22, 7, false, 200, 299))
        .expect("send");
    assert_eq!(reply(k2).rv, 0);
    k3.send_plock(&req(PlockOp::GET, 34, 7, false, 250, 250))
        .expect("send");
    let g = reply(k3);
    assert_eq!((g.rv, g.start, g.end, g.pid), (1, 200, 299, 22), "{g:?}");
    // one table on every node, printed by the C daemon and ours alike
    let t = m.same_table(&[1, 2, 3]);
    assert_eq!(t.lines().count(), 3, "{t}");
    // the C node unlocks: our waiter on node 1 is granted
    k3.send_plock(&req(PlockOp::UNLOCK, 33, 7, false, 0, 99))
        .expect("send");
    assert_eq!(reply(k3).rv, 0);
    let w = reply(k1);
    assert_eq!((w.rv, w.wait, w.owner), (0, true, 11), "{w:?}");
    m.same_table(&[1, 2, 3]);

    // node 2's daemon dies: ours on node 1 fences it, the C daemon waits for the result
    // and restarts the lockspace with nodes 1 and 3
    m.kill(2);
    m.wait_restarted(&[1, 3], &[1, 3]);
    assert_eq!(m.fenced(2), 1, "{}", m.fence_story(3));
    let c = std::fs::read_to_string(m.c_log(3)).unwrap_or_default();
    assert!(
        c.contains("fence status 2 receive 0 from 1"),
        "the C daemon took our FENCE_RESULT:\n{c}"
    );
    // node 2's lock is gone everywhere; node 1's granted lock stays
    let t = m.same_table(&[1, 3]);
    assert!(!t.contains("nodeid 2"), "{t}");
    assert!(t.contains("nodeid 1"), "{t}");
}

#[test]
fn state_transfer_both_ways_and_the_c_node_fenced() {
    let mut m = Mixed::new("xfr");
    m.start_c(1);
    m.start_ours(2);
    m.start_ours(3);
    m.settle();
    // the C daemon alone in the lockspace takes locks and queues a waiter
    m.join(1);
    let k1 = &m.kernels[0];
    for (owner, start, end) in [(11, 0, 9), (11, 20, 29), (13, 100, 199)] {
        k1.send_plock(&req(PlockOp::LOCK, owner, 9, false, start, end))
            .expect("send");
        assert_eq!(reply(k1).rv, 0);
    }
    k1.send_plock(&req(PlockOp::LOCK, 12, 9, true, 5, 25))
        .expect("send");
    assert!(k1.recv_plock_raw(Duration::from_millis(300)).is_none());
    // ours join: the table comes from the C daemon (PLOCKS_DATA) and is the same
    m.join(2);
    m.join(3);
    m.wait_members(&[1, 2, 3], &[1, 2, 3]);
    let t = m.same_table(&[1, 2, 3]);
    assert_eq!(t.lines().count(), 4, "3 locks and 1 waiter: {t}");
    // and it is live in ours: a conflicting request is refused, a free one granted
    let k2 = &m.kernels[1];
    k2.send_plock(&req(PlockOp::LOCK, 21, 9, false, 150, 160))
        .expect("send");
    assert_eq!(reply(k2).rv, -11);
    k2.send_plock(&req(PlockOp::LOCK, 21, 9, false, 300, 399))
        .expect("send");
    assert_eq!(reply(k2).rv, 0);

    // the C node dies: ours fence it and purge its locks and its waiter
    m.kill(1);
    m.wait_restarted(&[2, 3], &[2, 3]);
    assert_eq!(m.fenced(1), 1, "{}", m.fence_story(1));
    let t = m.same_table(&[2, 3]);
    assert_eq!(t.lines().count(), 1, "{t}");
    // ours only: CANCEL removes the waiter everywhere
    let k2 = &m.kernels[1];
    k2.send_plock(&req(PlockOp::LOCK, 23, 9, true, 300, 300))
        .expect("send");
    assert!(k2.recv_plock_raw(Duration::from_millis(300)).is_none());
    assert_eq!(m.same_table(&[2, 3]).lines().count(), 2);
    k2.send_plock(&req(PlockOp::CANCEL, 23, 9, false, 300, 300))
        .expect("send");
    let r = reply(k2);
    assert_eq!((r.op, r.rv), (PlockOp::CANCEL, 0), "{r:?}");
    assert_eq!(m.same_table(&[2, 3]).lines().count(), 1);
    // ours only: native mode. Node 2 claims inode 10 and decides it alone (no CPG round
    // trip); node 3's table still shows every lock (the owner's STATEs)
    let local = |m: &Mixed| {
        dlm_tests::metric_in_ns(&m.c.node_ns(2), "dlm_plock_local_total{lockspace=\"foo\"}")
    };
    let before = local(&m);
    for (owner, start, end) in [(24, 0, 9), (24, 20, 29), (25, 40, 49)] {
        k2.send_plock(&req(PlockOp::LOCK, owner, 10, false, start, end))
            .expect("send");
        assert_eq!(reply(k2).rv, 0);
    }
    assert!(local(&m) >= before + 2.0, "node 2 decided inode 10 itself");
    let t = m.same_table(&[2, 3]);
    assert_eq!(t.lines().filter(|l| l.starts_with("10 ")).count(), 3, "{t}");

    // it reboots and rejoins: now the table comes from ours to the C daemon
    m.reboot(1);
    m.start_c(1);
    m.join(1);
    m.wait_members(&[1, 2, 3], &[1, 2, 3]);
    let t = m.same_table(&[1, 2, 3]);
    assert!(t.contains("nodeid 2"), "{t}");
    let k1 = &m.kernels[0];
    k1.send_plock(&req(PlockOp::LOCK, 14, 9, false, 350, 350))
        .expect("send");
    assert_eq!(reply(k1).rv, -11, "the C daemon knows ours' lock");
    // and the locks node 2 decided alone: the change that added a C node turned native
    // mode off only after they were in every table
    k1.send_plock(&req(PlockOp::LOCK, 14, 10, false, 45, 45))
        .expect("send");
    assert_eq!(
        reply(k1).rv,
        -11,
        "the C daemon knows node 2's native locks"
    );
    // C-compatible again: node 2's requests are PLOCK messages the C daemon applies
    let before = local(&m);
    let k2 = &m.kernels[1];
    k2.send_plock(&req(PlockOp::LOCK, 24, 10, false, 60, 69))
        .expect("send");
    assert_eq!(reply(k2).rv, 0);
    assert_eq!(local(&m), before, "nothing decided alone beside a C node");
    let t = m.same_table(&[1, 2, 3]);
    assert_eq!(t.lines().filter(|l| l.starts_with("10 ")).count(), 4, "{t}");
    k1.send_plock(&req(PlockOp::LOCK, 14, 9, false, 0, 9))
        .expect("send");
    assert_eq!(reply(k1).rv, 0, "the C daemon's old locks were purged");
    m.same_table(&[1, 2, 3]);

    // now the C daemon is the lowest member: when node 3 dies it runs the agent, and ours
    // restart only on its FENCE_RESULT
    m.kill(3);
    m.wait_restarted(&[1, 2], &[1, 2]);
    assert_eq!(m.fenced(3), 1, "{}", m.fence_story(1));
    let st = m.dlm_tool(2, &["status"]);
    assert!(
        st.lines()
            .any(|l| l.starts_with("node 3 X ") && l.contains(" at 1 ")),
        "ours records node 3 as fenced by node 1:\n{st}"
    );
}
