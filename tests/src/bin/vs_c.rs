//! `vs_c [SECONDS]`: our daemon against Debian's C `dlm_controld` 4.2.0 (in its default mode
//! and with `plock_ownership=1`), side by side on one corosync node and the fake kernel, with
//! one workload driver (this binary) for all of them. The driver plays 16 processes, each
//! with one request outstanding (closed loop), on four cases: each process on its own file
//! (node-local), one file with disjoint ranges, one byte contended with F_SETLKW, and one
//! process alone on its file (the real-kernel bench's row, one request at a time). A
//! stand-in daemon that answers every request at once measures the driver itself first, and
//! `cpg_ceiling` last (one CPG round trip per request and nothing else: what any
//! C-compatible daemon could reach at most; `VS_KINDS` index 5). Runs
//! alternate daemon by daemon, twice, so machine drift cancels; each row is the median.
//! Per case: ops/s, latency p50/p99, CPU per op of the daemon and of corosync, non-blocking
//! replies out of request order (must be 0), and the ratio to C's default mode. The `ls`
//! query's latency under the same load comes from a second, shorter run of each case with
//! the query prober (`VS_PROBE_SECS`, 2 s), so the prober's load is in no rate.
//!
//! Needs root, corosync and Debian's dlm-controld (`.ci/run` installs them). Results:
//! docs/BENCHMARKS.md. The three-node cases are `vs_c3`'s.

#[path = "../../../cpg/tests/support/mod.rs"]
#[allow(clippy::all, missing_debug_implementations)]
mod support;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use dlm_proto::LockspaceName;
use dlm_proto::kernel::PlockInfo;
use dlm_tests::closed_loop::Daemons as Kind;
use dlm_tests::closed_loop::{
    BenchCase, Drive, Hops, LockUnlock, PerfCounts, Run, Script, alternate, bench_args, chosen,
    drive, exit_code, pin, pinned, probe_queries, start_daemon_of,
};
use dlm_tests::fake_kernel::daemon_end;
use dlm_tests::targets::{self, Target};
use dlm_tests::{Daemon, FakeKernel, build_shim, cpu_ticks};
use support::Corosync;

/// Simulated processes (`VS_PROCS=<n>` for profiling; the tables use 16).
fn procs() -> u64 {
    std::env::var("VS_PROCS")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(16)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Case {
    NodeLocal,
    OneFile,
    Contended,
    /// One process locking and unlocking its file alone: each request waits for the
    /// last reply (the real-kernel bench's row, on the fake kernel).
    Alone,
}

impl BenchCase for Case {
    fn label(self) -> &'static str {
        match self {
            Self::NodeLocal => "1 node, each process on its own file",
            Self::OneFile => "1 node, one file, disjoint ranges",
            Self::Contended => "1 node, one byte contended (F_SETLKW)",
            Self::Alone => "1 node, one process alone on its file",
        }
    }

    fn targets(self) -> &'static [Target] {
        match self {
            Self::NodeLocal | Self::OneFile => targets::ONE_NODE_LOCAL,
            Self::Contended => targets::ONE_NODE_CONTENDED,
            Self::Alone => targets::ONE_PROCESS,
        }
    }
}

impl Case {
    /// Its simulated processes.
    fn procs(self) -> u64 {
        if self == Self::Alone { 1 } else { procs() }
    }

    /// Process `p`'s lock: (inode, start, end, wait). `VS_WAIT=1`: the uncontended cases
    /// with F_SETLKW too, as `lockf(LOCK_EX)` asks (the real-kernel bench's loop).
    fn lock_of(self, p: u64) -> (u64, u64, u64, bool) {
        static WAIT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let wait = *WAIT.get_or_init(|| std::env::var("VS_WAIT").is_ok_and(|w| w == "1"));
        match self {
            Self::NodeLocal | Self::Alone => (1000 + p, 0, 9, wait),
            Self::OneFile => (7, 10 * p, 10 * p + 9, wait),
            Self::Contended => (9, 0, 0, true),
        }
    }
}

/// A daemon stand-in on the fake kernel's plock device: every request answered rv 0 at once.
fn stand_in(root: &Path) -> Option<std::thread::JoinHandle<()>> {
    use nix::sys::socket::{MsgFlags, recv, send};
    let fd = daemon_end(root).ok()?;
    Some(std::thread::spawn(move || {
        if pinned() {
            pin(0, true);
        }
        let mut buf = [0u8; 128];
        while let Ok(n) = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            let Ok(mut info) = PlockInfo::decode(&buf[..n]) else {
                return;
            };
            info.rv = 0;
            if send(fd.as_raw_fd(), &info.encode(), MsgFlags::MSG_NOSIGNAL).is_err() {
                return;
            }
        }
    }))
}

/// Where a run's daemon lives.
struct Setup {
    root: PathBuf,
    kind: Kind,
    k: FakeKernel,
    daemon: Option<Daemon>,
    standin: Option<std::thread::JoinHandle<()>>,
}

fn start(cs: &Corosync, base: &Path, shim: &Path, kind: Kind, n: usize) -> Option<Setup> {
    let root = base.join(format!("run{n}"));
    let _ = std::fs::remove_dir_all(&root);
    let k = FakeKernel::start(&root).ok()?;
    let log = base.join(format!("c{n}.log"));
    let (daemon, standin) = match kind {
        Kind::StandIn => (None, Some(stand_in(&root)?)),
        _ => (
            Some(start_daemon_of(kind, &cs.netns, &k, shim, &log)?),
            None,
        ),
    };
    if pinned() {
        // the driver (this thread, and the prober it spawns) on the first CPU
        let daemon = daemon.as_ref().is_none_or(|d| pin(d.0.id(), true));
        if !daemon || !pin(0, false) {
            eprintln!("VS_PIN: cannot pin the run's threads");
            return None;
        }
    }
    Some(Setup {
        root,
        kind,
        k,
        daemon,
        standin,
    })
}

fn one_run(cs: &Corosync, s: &Setup, case: Case, secs: f64) -> Option<Run> {
    let name = format!("b{}", case as u8);
    let fsid = dlm_proto::wire::global_id(&LockspaceName::new(name.as_bytes()).ok()?);
    if s.kind.is_dlm_controld() {
        if !s.k.announce(&name).ok()? || !s.k.wait_joined(&name, Duration::from_secs(20)) {
            return None;
        }
    } else {
        std::thread::sleep(Duration::from_millis(200));
    }
    let dpid = s.daemon.as_ref().map_or(0, |d| d.0.id());
    let hops = s
        .kind
        .is_dlm_controld()
        .then(|| Hops::read(&cs.netns, &name))
        .flatten();
    let (d0, c0) = (cpu_ticks(dpid), cpu_ticks(cs.pid()));
    let perf = PerfCounts::start(dpid, secs);
    let perf_cs = PerfCounts::start(if dpid == 0 { 0 } else { cs.pid() }, secs);
    let script = LockUnlock(|p, _| case.lock_of(p));
    let first = 100 + 1000 * case as u64;
    let mut d = drive(&s.k, fsid, &script, first, case.procs(), secs)?;
    let who = format!("{} / {}", case.label(), s.kind.label());
    let after = hops.and_then(|_| Hops::read(&cs.netns, &name));
    let split = hops.zip(after).map(|(before, after)| after.since(&before));
    if let Some(split) = split {
        eprintln!("hops {who}: {split}");
    }
    print_perf(&who, perf, d.ops);
    print_perf(
        &format!("corosync beside {}", s.kind.label()),
        perf_cs,
        d.ops,
    );
    let (d1, c1) = (cpu_ticks(dpid), cpu_ticks(cs.pid()));
    let coro = if s.daemon.is_some() {
        c1.saturating_sub(c0)
    } else {
        0
    };
    let mut ls = Vec::new();
    if s.kind.is_dlm_controld() {
        let owners = first + PROBED_OWNERS;
        let (again, probes) = probed(cs, s, fsid, &script, owners, case.procs())?;
        // the prober's run is held to the reply order too
        d.out_of_order += again.out_of_order;
        ls = probes;
    }
    let mut run = Run::of(&mut d, secs, d1.saturating_sub(d0), coro, &mut ls);
    run.hops = split;
    Some(run)
}

/// How far the prober's run numbers its processes from the measured run's (that run has
/// drained every lock, and each case has a lockspace of its own: distinct owners only keep
/// the two runs apart in the plock log).
const PROBED_OWNERS: u64 = 500;

/// The same load driven again for [`probe_secs`] while the query prober runs: that run,
/// and the `ls` columns' latencies. The rates come from the run before, without it: a
/// query every 2 ms under `SCHED_FIFO` takes a share of a daemon's rate (ours and C's
/// alike, the ceiling's not at all, which has no query socket), and a monitor asks far
/// less often.
fn probed(
    cs: &Corosync,
    s: &Setup,
    fsid: u32,
    script: &dyn Script,
    first: u64,
    procs: u64,
) -> Option<(Drive, Vec<Duration>)> {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        let prober = sc.spawn(|| probe_queries(&cs.netns, &stop));
        let d = drive(&s.k, fsid, script, first, procs, probe_secs());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let ls = prober.join().ok();
        d.zip(ls)
    })
}

/// `VS_PROBE_SECS=<s>`: how long the prober's run lasts (2 s unless said).
fn probe_secs() -> f64 {
    std::env::var("VS_PROBE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2.0)
}

/// `VS_PERF=1`: a process's system calls and context switches per op of the run.
fn print_perf(who: &str, counts: PerfCounts, ops: u64) {
    if let Some((sys, switches)) = counts.finish() {
        #[allow(clippy::cast_precision_loss)]
        let per = |n: u64| n as f64 / ops.max(1) as f64;
        eprintln!(
            "perf {who}: {:.2} syscalls/op, {:.3} context switches/op",
            per(sys),
            per(switches)
        );
    }
}

fn main() -> ExitCode {
    let secs = match bench_args() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let cs = Corosync::start("vsc");
    let base = std::env::temp_dir().join(format!("dlm-vsc-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&base);
    let Ok(shim) = build_shim(&base) else {
        eprintln!("cannot build the LD_PRELOAD shim (cc)");
        return ExitCode::FAILURE;
    };
    // `VS_KINDS=<indexes>` (e.g. `24`: C's ownership mode and ours), for profiling
    let kinds = chosen(
        &[
            Kind::StandIn,
            Kind::CDefault,
            Kind::COwnership,
            Kind::OursCompat,
            Kind::Ours,
            Kind::CpgCeiling,
        ],
        std::env::var("VS_KINDS").ok().as_deref(),
    );
    // `VS_CASES=<indexes>` (e.g. `2`: the contended case alone), for profiling
    let cases = chosen(
        &[Case::NodeLocal, Case::OneFile, Case::Contended, Case::Alone],
        std::env::var("VS_CASES").ok().as_deref(),
    );
    let done = alternate(
        &kinds,
        &cases,
        |kind, n| start(&cs, &base, &shim, kind, n),
        |s, case| one_run(&cs, s, case, secs),
        |s| {
            drop(s.daemon);
            drop(s.standin);
            let _ = std::fs::remove_dir_all(&s.root);
        },
    );
    let _ = std::fs::remove_dir_all(&base);
    exit_code(done)
}
