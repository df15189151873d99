//! `vs_c3 [SECONDS]`: our daemon against Debian's C `dlm_controld` 4.2.0 (default mode and
//! `plock_ownership=1`) on three corosync nodes in network namespaces, a fake kernel each,
//! with the workload driver of `vs_c` (`dlm_tests::closed_loop`) on the nodes that carry
//! load, 16 processes per loaded node. Cases: the load on node 1 only (own files, one file,
//! one contended byte), every node on its own files, every node on 1000 shared files, every
//! node on one contended byte, and lock passing between two nodes (processes of nodes 1 and
//! 2 side by side on a ring of ranges of one file, each taking the next range with F_SETLKW
//! and then releasing its last). Runs alternate daemon by daemon, twice; each row is the
//! median. Per case: ops/s (all nodes), latency p50/p99, CPU per op of the three daemons
//! and of the three corosyncs, non-blocking replies out of order, and the ratio to C's
//! default mode. Results: docs/BENCHMARKS.md. For profiling: `VS_ONLY=<kind>,<case>`
//! (0-based indexes of the two lists) runs one pair; `VS_MESSAGES=1` prints the CPG
//! messages our daemons sent per op and the packets node 1's totem sent.

#[path = "../../../cpg/tests/support/mod.rs"]
#[allow(clippy::all, dead_code, missing_debug_implementations)]
mod support;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use dlm_proto::LockspaceName;
use dlm_proto::kernel::PlockOp;
use dlm_tests::closed_loop::Daemons as Kind;
use dlm_tests::closed_loop::{
    BenchCase, Drive, Hops, LockUnlock, Run, Script, Step, alternate, bench_args, chosen, drive,
    exit_code, start_daemon_of,
};
use dlm_tests::targets::{self, Target};
use dlm_tests::{Daemon, FakeKernel, build_shim, cpu_ticks, writes};
use support::Cluster;

const PROCS: u64 = 16;
const NODES: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Case {
    OneNodeOwnFiles,
    OneNodeOneFile,
    OneNodeContended,
    AllOwnFiles,
    AllSharedFiles,
    AllContended,
    LockPassing,
}

impl Case {
    const ALL: [Self; 7] = [
        Self::OneNodeOwnFiles,
        Self::OneNodeOneFile,
        Self::OneNodeContended,
        Self::AllOwnFiles,
        Self::AllSharedFiles,
        Self::AllContended,
        Self::LockPassing,
    ];

    /// The nodes that carry load.
    fn loaded(self) -> &'static [usize] {
        match self {
            Self::OneNodeOwnFiles | Self::OneNodeOneFile | Self::OneNodeContended => &[1],
            Self::LockPassing => &[1, 2],
            _ => &[1, 2, 3],
        }
    }
}

impl BenchCase for Case {
    fn label(self) -> &'static str {
        match self {
            Self::OneNodeOwnFiles => "3 nodes, load on node 1, own files",
            Self::OneNodeOneFile => "3 nodes, load on node 1, one file",
            Self::OneNodeContended => "3 nodes, load on node 1, contended",
            Self::AllOwnFiles => "3 nodes, every node on its own files",
            Self::AllSharedFiles => "3 nodes, every node on 1000 shared files",
            Self::AllContended => "3 nodes, every node on one contended byte",
            Self::LockPassing => "lock passing between nodes 1 and 2",
        }
    }

    fn targets(self) -> &'static [Target] {
        match self {
            Self::OneNodeOwnFiles | Self::OneNodeOneFile | Self::AllOwnFiles => {
                targets::THREE_NODES_LOCAL
            }
            Self::OneNodeContended | Self::AllContended => targets::THREE_NODES_CONTENDED,
            Self::AllSharedFiles => targets::SHARED_FILES,
            Self::LockPassing => targets::LOCK_PASSING,
        }
    }
}

/// The ring of lock passing: 64 ranges of one inode; the 16 processes of a node start 4
/// apart, node 2's between node 1's; each holds a range, takes the next (F_SETLKW), then
/// lets the one behind it go.
struct Passing {
    node: u64,
}

const RING: u64 = 64;

impl Script for Passing {
    fn step(&self, p: u64, n: u64) -> Step {
        let origin = 4 * p + 2 * (self.node - 1);
        let range = |k: u64| {
            let j = (origin + k) % RING;
            (10 * j, 10 * j + 9)
        };
        let (op, (start, end)) = match n {
            0 => (PlockOp::LOCK, range(0)),
            n if n % 2 == 1 => (PlockOp::LOCK, range(n.div_ceil(2))),
            n => (PlockOp::UNLOCK, range(n / 2 - 1)),
        };
        Step {
            op,
            number: 77,
            start,
            end,
            wait: op == PlockOp::LOCK,
        }
    }
}

/// Process `p` of `node`'s lock at its `k`-th cycle in the lock/unlock cases.
fn lock_of(case: Case, node: u64, p: u64, k: u64) -> (u64, u64, u64, bool) {
    let g = 16 * (node - 1) + p; // a process number unique in the cluster
    match case {
        Case::OneNodeOwnFiles | Case::AllOwnFiles => (1000 + g, 0, 9, false),
        Case::OneNodeOneFile => (7, 10 * g, 10 * g + 9, false),
        // a walk over the shared inodes, a range of its own on each
        Case::AllSharedFiles => {
            let x = (g * 7919 + k * 104_729) % 1000;
            (5000 + x, 10 * g, 10 * g + 9, false)
        }
        Case::OneNodeContended | Case::AllContended | Case::LockPassing => (9, 0, 0, true),
    }
}

struct Setup {
    roots: Vec<PathBuf>,
    kernels: Vec<FakeKernel>,
    daemons: Vec<Daemon>,
}

fn start(c: &Cluster, base: &Path, shim: &Path, kind: Kind, n: usize) -> Option<Setup> {
    let mut s = Setup {
        roots: Vec::new(),
        kernels: Vec::new(),
        daemons: Vec::new(),
    };
    for node in 1..=NODES {
        let root = base.join(format!("run{n}-n{node}"));
        let _ = std::fs::remove_dir_all(&root);
        let k = FakeKernel::start(&root).ok()?;
        let ns = c.node_ns(node);
        let log = base.join(format!("c{n}-{node}.log"));
        let d = start_daemon_of(kind, &ns, &k, shim, &log)?;
        s.roots.push(root);
        s.kernels.push(k);
        s.daemons.push(d);
    }
    Some(s)
}

/// Every node joins the case's lockspace (one at a time, as mounts would).
fn join_all(s: &Setup, name: &str) -> Option<()> {
    for k in &s.kernels {
        if !k.announce(name).ok()? || !k.wait_joined(name, Duration::from_secs(30)) {
            return None;
        }
    }
    Some(())
}

/// Every node leaves it again, and the leave completes (a daemon killed with a lockspace
/// is a failed member to the others, and C and we both have corosync remove its node).
fn leave_all(s: &Setup, name: &str) -> Option<()> {
    let path = format!("sys/kernel/dlm/{name}/event_done");
    for k in &s.kernels {
        k.release(name).ok()?;
    }
    for k in &s.kernels {
        if !k.wait_records(Duration::from_secs(30), |r| writes(r, &path).len() >= 2) {
            return None;
        }
    }
    Some(())
}

fn one_run(c: &Cluster, s: &Setup, case: Case, secs: f64) -> Option<Run> {
    let name = format!("m{}", case as u8);
    let fsid = dlm_proto::wire::global_id(&LockspaceName::new(name.as_bytes()).ok()?);
    join_all(s, &name)?;
    let cpu = || -> (u64, u64) {
        let d = s.daemons.iter().map(|d| cpu_ticks(d.0.id())).sum();
        let cs = (1..=NODES).map(|k| cpu_ticks(c.corosync_pid(k))).sum();
        (d, cs)
    };
    let srp = |key: &str| -> u64 {
        let out = dlm_tests::stdout_in_ns(&c.node_ns(1), "corosync-cmapctl", &["-m", "stats", key]);
        out.split('=')
            .nth(1)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let want = std::env::var("VS_MESSAGES").is_ok();
    let m0 = if want { srp("stats.srp.mcast_tx") } else { 0 };
    let hops0 = Hops::read(&c.node_ns(1), &name);
    let (d0, c0) = cpu();
    let first = 100 + 1000 * case as u64;
    let drives: Vec<Option<Drive>> = std::thread::scope(|sc| {
        let handles: Vec<_> = case
            .loaded()
            .iter()
            .map(|&node| {
                let k = &s.kernels[node - 1];
                let node = node as u64;
                sc.spawn(move || {
                    let owners = first + 100 * node;
                    if case == Case::LockPassing {
                        drive(k, fsid, &Passing { node }, owners, PROCS, secs)
                    } else {
                        let script = LockUnlock(|p, k| lock_of(case, node, p, k));
                        drive(k, fsid, &script, owners, PROCS, secs)
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    });
    let (d1, c1) = cpu();
    let hops1 = hops0.and_then(|_| Hops::read(&c.node_ns(1), &name));
    let split = hops0.zip(hops1).map(|(before, after)| after.since(&before));
    if let Some(split) = split {
        eprintln!("hops {}, node 1: {split}", case.label());
    }
    if std::env::var("VS_MESSAGES").is_ok() {
        let series = format!("dlm_cpg_messages_sent_total{{lockspace=\"{name}\"}}");
        let sent: f64 = (1..=NODES)
            .map(|k| dlm_tests::metric_in_ns(&c.node_ns(k), &series))
            .sum();
        let ops: u64 = drives.iter().flatten().map(|d| d.ops).sum();
        #[allow(clippy::cast_precision_loss)]
        let per = sent / ops.max(1) as f64;
        let m1 = srp("stats.srp.mcast_tx");
        eprintln!(
            "{name}: {sent} messages sent for {ops} ops ({per:.2} per op); node 1's totem sent {} packets",
            m1.saturating_sub(m0)
        );
    }
    leave_all(s, &name)?;
    let mut all = Drive::default();
    for d in drives {
        let d = d?;
        all.ops += d.ops;
        all.out_of_order += d.out_of_order;
        all.latencies.extend(d.latencies);
    }
    let mut run = Run::of(
        &mut all,
        secs,
        d1.saturating_sub(d0),
        c1.saturating_sub(c0),
        &mut [],
    );
    run.hops = split;
    Some(run)
}

fn main() -> ExitCode {
    let secs = match bench_args() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let c = Cluster::start("vc3", NODES);
    // the three corosyncs form one membership before any daemon starts
    std::thread::sleep(Duration::from_secs(3));
    let base = std::env::temp_dir().join(format!("dlm-vsc3-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&base);
    let Ok(shim) = build_shim(&base) else {
        eprintln!("cannot build the LD_PRELOAD shim (cc)");
        return ExitCode::FAILURE;
    };
    // `VS_KINDS=<indexes>` and `VS_CASES=<indexes>` (digits, 0-based: `VS_KINDS=13
    // VS_CASES=2`, C's ownership mode and native mode on the contended case), for profiling;
    // `VS_ONLY=<kind>,<case>` is one of each
    let (pick_kinds, pick_cases) = match std::env::var("VS_ONLY").ok() {
        Some(v) => {
            let (k, c) = v.split_once(',').unwrap_or((&v, ""));
            (Some(k.to_owned()), (!c.is_empty()).then(|| c.to_owned()))
        }
        None => (
            std::env::var("VS_KINDS").ok(),
            std::env::var("VS_CASES").ok(),
        ),
    };
    let kinds = chosen(
        &[
            Kind::CDefault,
            Kind::COwnership,
            Kind::OursCompat,
            Kind::Ours,
        ],
        pick_kinds.as_deref(),
    );
    let cases = chosen(&Case::ALL, pick_cases.as_deref());
    let done = alternate(
        &kinds,
        &cases,
        |kind, n| start(&c, &base, &shim, kind, n),
        |s, case| one_run(&c, s, case, secs),
        |s| {
            // no lockspace left: each exits at SIGTERM as a member that left
            for mut d in s.daemons {
                d.terminate();
                let _ = d.wait_exit(Duration::from_secs(10));
            }
            for r in &s.roots {
                let _ = std::fs::remove_dir_all(r);
            }
        },
    );
    let _ = std::fs::remove_dir_all(&base);
    exit_code(done)
}
