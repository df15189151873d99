//! `locks_load [LOCKS [BOUND [PER_FILE]]]`: one local user takes LOCKS one-byte locks
//! (default 1,500,000; PER_FILE to a file, default 1000) through our daemon (embedded
//! group, or one corosync node with `LOCKS_COROSYNC=1`; fake kernel, a network namespace of
//! its own) with `plock_locks_max=BOUND` in dlm.conf (default 1,000,000; 0: no bound): how
//! many are granted and refused, and the daemon's resident memory after each fifth. Needs
//! root; finds `dlm_controld` next to itself. Results: docs/BENCHMARKS.md.

#[path = "../../../cpg/tests/support/mod.rs"]
mod support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use dlm_proto::kernel::PlockOp;
use dlm_tests::{DaemonBuilder, FakeKernel, Netns, enter_netns, foo_request};

/// Requests in flight at once.
const WINDOW: u64 = 256;

fn main() -> ExitCode {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (n, bound, per_file) = (arg(1, 1_500_000), arg(2, 1_000_000), arg(3, 1000).max(1));
    let Some((k, d, _ns, root)) = start(bound) else {
        eprintln!("daemon or join failed");
        return ExitCode::FAILURE;
    };
    let lock = |i: u64| {
        let byte = i % per_file * 2;
        foo_request(PlockOp::LOCK, 7, i / per_file, false, byte, byte)
    };
    println!("plock_locks_max={bound}, {n} locks asked for, {per_file} to a file");
    println!("| asked | granted | refused (ENOLCK) | daemon RSS | requests/s |");
    println!("|---|---|---|---|---|");
    let (mut granted, mut refused, mut i) = (0u64, 0u64, 0u64);
    let fifth = n.div_ceil(5).max(1);
    let mut t = Instant::now();
    while i < n {
        let stop = (i + fifth).min(n);
        let begun = i;
        while i < stop {
            let sent = WINDOW.min(stop - i);
            for j in i..i + sent {
                if k.send_plock(&lock(j)).is_err() {
                    return ExitCode::FAILURE;
                }
            }
            for _ in 0..sent {
                match k.recv_plock(Duration::from_secs(30)).map(|r| r.rv) {
                    Some(0) => granted += 1,
                    Some(rv) if rv == -dlm_proto::errno::ENOLCK => refused += 1,
                    other => {
                        eprintln!("unexpected reply {other:?}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            i += sent;
        }
        let rate = (i - begun) as f64 / t.elapsed().as_secs_f64();
        println!(
            "| {i} | {granted} | {refused} | {} MiB | {rate:.0} |",
            rss_kib(d.0.id()) / 1024
        );
        t = Instant::now();
    }
    drop(k);
    let _ = std::fs::remove_dir_all(&root);
    ExitCode::SUCCESS
}

/// What a run holds: the fake kernel, the daemon, its namespace (kept alive by a
/// `Netns` or by corosync), the kernel's root.
type Setup = (FakeKernel, dlm_tests::Daemon, Space, std::path::PathBuf);

/// The namespace the daemon runs in, and whatever keeps it.
enum Space {
    Alone(Netns),
    Corosync(support::Corosync),
}

impl Space {
    fn name(&self) -> &str {
        match self {
            Self::Alone(ns) => &ns.0,
            Self::Corosync(cs) => &cs.netns,
        }
    }
}

/// The daemon with `plock_locks_max=bound`, lockspace `foo` joined.
fn start(bound: u64) -> Option<Setup> {
    let space = if std::env::var_os("LOCKS_COROSYNC").is_some_and(|v| v == "1") {
        Space::Corosync(support::Corosync::start("lload"))
    } else {
        Space::Alone(Netns::new("lload").ok()?)
    };
    enter_netns(space.name()).ok()?;
    let root = std::env::temp_dir().join(format!("dlm-lload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let k = FakeKernel::start(&root).ok()?;
    std::fs::create_dir_all(root.join("etc/dlm")).ok()?;
    std::fs::write(
        root.join("etc/dlm/dlm.conf"),
        format!("plock_locks_max={bound}\n"),
    )
    .ok()?;
    let bin = std::env::current_exe().ok()?.parent()?.join("dlm_controld");
    let d = match &space {
        Space::Alone(ns) => DaemonBuilder::new(bin, &root)
            .embedded()
            .spawn(&ns.0)
            .ok()?,
        Space::Corosync(cs) => {
            dlm_tests::start_daemon_on_corosync(&cs.netns, &bin, &root, &k, &[])?
        }
    };
    let t = Duration::from_secs(10);
    (k.wait_daemon(t) && k.announce("foo").unwrap_or(false) && k.wait_joined("foo", t))
        .then_some((k, d, space, root))
}

/// VmRSS of process `pid`, KiB (0 if unreadable).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
