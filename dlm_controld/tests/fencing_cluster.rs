//! Fencing on three real corosync nodes (network namespaces), our daemon on a fake kernel on
//! each, `enable_fencing=1` and a `fence_all` agent (a shell script that records its stdin
//! and exits with the status an operator file gives): when node 3 dies, the lockspace stays
//! stopped, `dlm_tool ls` says `wait fencing`, the agents run on the lowest survivor and,
//! when it fails, on the next; the lockspace restarts only once an agent succeeds — or when
//! the operator runs the real `dlm_tool fence_ack 3`.

#[path = "../../cpg/tests/support/mod.rs"]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dlm_tests::{
    Daemon, FakeKernel, Record, configfs_members, control_writes, metric_in_ns,
    settle_post_join_delay, start_daemon_on_corosync, stdout_in_ns,
};
use support::Cluster;

const T: Duration = Duration::from_secs(30);

const AGENT: &str = "#!/bin/sh
input=$(cat)
log=$(printf '%s\\n' \"$input\" | sed -n 's/^log=//p')
printf 'run\\n%s' \"$input\" >> \"$log\"
exit $(cat \"$log.status\" 2>/dev/null || echo 0)
";

/// From `dlm_tool status`'s `node 3 X add .. rem .. fail .. fence <t> at <actor> <wall>`
/// line: who fenced node 3 (the fence time must be set).
fn fenced_by(status: &str) -> u32 {
    let line = status
        .lines()
        .find(|l| l.starts_with("node 3 X "))
        .unwrap_or_else(|| panic!("no line for node 3: {status}"));
    let w: Vec<&str> = line.split(' ').collect();
    let at = w.iter().position(|x| *x == "at").expect("at");
    let fence: u64 = w[at - 1].parse().expect("fence time");
    assert!(fence > 0, "{line}");
    assert!(
        !status.contains("fence 3 "),
        "still needs fencing: {status}"
    );
    w[at + 1].parse().expect("actor")
}

struct Setup {
    c: Cluster,
    base: PathBuf,
    log: PathBuf,
    kernels: Vec<FakeKernel>,
    daemons: Vec<Daemon>,
}

impl Setup {
    /// Three nodes with fencing on; the agent exits with `status` until told otherwise.
    fn start(tag: &str, status: &str) -> Self {
        let c = Cluster::start(tag, 3);
        let base = std::env::temp_dir().join(format!("dlm-fence-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).expect("base");
        let agent = base.join("agent.sh");
        std::fs::write(&agent, AGENT).expect("agent");
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let log = base.join("fenced");
        std::fs::write(log.with_extension("status"), status).expect("status");
        let roots: Vec<PathBuf> = (1..=3).map(|k| base.join(format!("n{k}"))).collect();
        for r in &roots {
            std::fs::create_dir_all(r.join("etc/dlm")).expect("etc");
            std::fs::write(
                r.join("etc/dlm/dlm.conf"),
                format!("fence_all {} log={}\n", agent.display(), log.display()),
            )
            .expect("dlm.conf");
        }
        let kernels: Vec<FakeKernel> = roots
            .iter()
            .map(|r| FakeKernel::start(r).expect("fake kernel"))
            .collect();
        let daemons = (1..=3)
            .map(|k| {
                start_daemon_on_corosync(
                    &c.node_ns(k),
                    Path::new(env!("CARGO_BIN_EXE_dlm_controld")),
                    &roots[k - 1],
                    &kernels[k - 1],
                    &["-f", "1"],
                )
                .unwrap_or_else(|| panic!("daemon {k} did not come up"))
            })
            .collect();
        let s = Self {
            c,
            base,
            log,
            kernels,
            daemons,
        };
        // started with the default post_join_delay: 1 s once all three are members
        let nss: Vec<String> = (1..=3).map(|k| s.c.node_ns(k)).collect();
        assert!(
            settle_post_join_delay(&nss, 1, T),
            "post_join_delay not set"
        );
        s
    }

    /// Joins foo everywhere, then kills node 3 (daemon and corosync).
    fn join_then_kill_3(&mut self) {
        for k in &self.kernels {
            assert!(k.announce("foo").expect("announce"));
            assert!(k.wait_joined("foo", T), "join: {:?}", k.records());
        }
        for k in &self.kernels {
            assert!(k.wait_records(T, |r| configfs_members(r, "foo") == vec![1, 2, 3]));
        }
        drop(self.daemons.pop());
        self.c.signal(3, libc::SIGKILL);
    }

    fn runs(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches("run\n")
            .count()
    }

    fn wait_runs(&self, n: usize) -> bool {
        let end = Instant::now() + T;
        while Instant::now() < end {
            if self.runs() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The real dlm_tool on node `node`.
    fn dlm_tool(&self, node: usize, args: &[&str]) -> String {
        stdout_in_ns(&self.c.node_ns(node), "dlm_tool", args)
    }

    /// One series of node `node`'s metrics endpoint (0 when absent).
    fn metric(&self, node: usize, series: &str) -> f64 {
        metric_in_ns(&self.c.node_ns(node), series)
    }

    /// The survivors have stopped foo and not started it again.
    fn assert_stopped(&self) {
        for (i, k) in self.kernels[..2].iter().enumerate() {
            assert!(
                k.wait_records(T, |r| control_writes(r, "foo").ends_with(b"1\x000\x00")),
                "node {} did not stop: {:?}",
                i + 1,
                control_writes(&k.records(), "foo")
            );
            // the pending change may still wait for the ring id or messages a moment
            let end = Instant::now() + T;
            let mut ls = self.dlm_tool(i + 1, &["ls"]);
            while !ls.contains("\nnew status    wait fencing\n") && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(100));
                ls = self.dlm_tool(i + 1, &["ls"]);
            }
            assert!(
                ls.contains("\nnew status    wait fencing\n"),
                "node {}: {ls}",
                i + 1
            );
            // and it has not started again
            assert!(
                control_writes(&k.records(), "foo").ends_with(b"1\x000\x00"),
                "node {} restarted before fencing",
                i + 1
            );
        }
    }

    /// The survivors started foo again with nodes 1 and 2.
    fn assert_restarted(&self) {
        for (i, k) in self.kernels[..2].iter().enumerate() {
            let restarted = |r: &[Record]| {
                configfs_members(r, "foo") == vec![1, 2]
                    && control_writes(r, "foo").ends_with(b"1\x000\x001\x00")
            };
            assert!(
                k.wait_records(T, restarted),
                "node {}: members {:?}, control {:?}",
                i + 1,
                configfs_members(&k.records(), "foo"),
                control_writes(&k.records(), "foo")
            );
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.daemons.clear();
        self.kernels.clear();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[test]
fn failed_node_is_fenced_before_its_lockspaces_restart() {
    let mut s = Setup::start("fnc", "1");
    s.join_then_kill_3();
    // node 1's agent fails, node 2's too (the next actor), then node 1 again
    // (repeat_failed_fencing): meanwhile nothing restarts
    assert!(s.wait_runs(3), "agents ran {} times", s.runs());
    s.assert_stopped();
    // at C's pace, about once a second across the cluster (a failing agent used to be
    // re-run every ~10 ms: hundreds in these four seconds)
    let before = s.runs();
    std::thread::sleep(Duration::from_secs(4));
    let more = s.runs() - before;
    assert!((1..=8).contains(&more), "{more} agent runs in 4 s");
    let log = std::fs::read_to_string(&s.log).expect("agent log");
    let first = log.split("run\n").nth(1).expect("a run");
    let prefix = format!("log={}\nnode=3\nfail_time=", s.log.display());
    assert!(first.starts_with(&prefix), "{first:?}");
    let t: u64 = first[prefix.len()..].trim_end().parse().expect("fail_time");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    assert!(t <= now && now - t < 60, "fail_time {t}, now {now}");
    assert_eq!(s.metric(1, "dlm_nodes_need_fencing"), 1.0);
    let runs = s.metric(1, "dlm_fence_agent_runs_total{device=\"fence_all\"}")
        + s.metric(2, "dlm_fence_agent_runs_total{device=\"fence_all\"}");
    assert!(runs >= 3.0, "agent runs counted: {runs}");
    assert!(s.metric(2, "dlm_fence_results_received_total{outcome=\"failed\"}") >= 2.0);
    // the device starts working: the next attempt succeeds and everyone restarts foo
    std::fs::write(s.log.with_extension("status"), "0").expect("status");
    s.assert_restarted();
    let actor = fenced_by(&s.dlm_tool(2, &["status"]));
    assert!(actor == 1 || actor == 2, "fenced by {actor}");
    assert_eq!(s.metric(2, "dlm_nodes_need_fencing"), 0.0);
    assert_eq!(
        s.metric(2, "dlm_fence_results_received_total{outcome=\"fenced\"}"),
        1.0
    );
}

#[test]
fn fence_ack_from_the_real_dlm_tool_ends_the_wait() {
    let mut s = Setup::start("fak", "1");
    s.join_then_kill_3();
    assert!(s.wait_runs(1), "no agent ran");
    s.assert_stopped();
    // the operator checked node 3 is down and says so, on node 2
    let _ = s.dlm_tool(2, &["fence_ack", "3"]);
    s.assert_restarted();
    // node 1 records node 2 (the sender of the acknowledgement) as the one that fenced it
    assert_eq!(fenced_by(&s.dlm_tool(1, &["status"])), 2);
    assert_eq!(
        s.metric(
            1,
            "dlm_fence_results_received_total{outcome=\"acknowledged\"}"
        ),
        1.0
    );
}

#[test]
fn a_daemon_stopped_cleanly_is_not_fenced() {
    // `systemctl stop dlm` with no lockspace: the daemon leaves its group before it goes,
    // so the others see a leave, not its process going down (a failure they would fence)
    let mut s = Setup::start("stop", "0");
    let mut d3 = s.daemons.pop().expect("node 3's daemon");
    d3.terminate();
    // a SIGTERM just after startup is acted on, not fatal (the handlers come first)
    let st = d3.wait_exit(T);
    assert!(
        st.is_some_and(|st| st.success()),
        "node 3's daemon ended: {st:?}"
    );
    // fencing would have started after post_join_delay (now 1 s)
    std::thread::sleep(Duration::from_secs(4));
    let dump = s.dlm_tool(1, &["dump"]);
    assert!(
        !dump.contains("daemon remove 3"),
        "node 3 counted as failed: {dump}"
    );
    assert_eq!(s.runs(), 0, "an agent ran for a clean stop");
}
