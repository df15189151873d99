//! `flood_load [N]`: what an unprivileged flood of the local listeners costs root and the
//! kernel path. One daemon (embedded group) on a fake kernel in a network namespace of its
//! own, under a descriptor limit of 1024 (systemd's default soft limit). Measured without a
//! flood, then while uid 65534 holds N (default 1500) connections to each of the main
//! socket, the query socket and the metrics endpoint (the `flood` binary): root's
//! `dlm_tool ls` query (LOCKSPACES) latency, a lockspace join's time (online uevent to
//! event_done), and the daemon's CPU while the flood is held. Needs root; finds
//! `dlm_controld` and `flood` next to itself. Results: docs/BENCHMARKS.md.

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use dlm_proto::query::{Command, DlmcHeader, HEADER_SIZE, QUERY_SOCK_NAME};
use dlm_tests::{Daemon, FakeKernel, Flood, Netns, cpu_ticks, enter_netns, writes};

/// One LOCKSPACES query, reply read to the end; its duration.
fn ls_query() -> Option<Duration> {
    let t = Instant::now();
    let addr = SocketAddr::from_abstract_name(QUERY_SOCK_NAME).ok()?;
    let mut s = UnixStream::connect_addr(&addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut h = DlmcHeader::new(Command::LOCKSPACES);
    h.data = 128;
    s.write_all(&h.encode()).ok()?;
    let mut buf = Vec::with_capacity(HEADER_SIZE + 4096);
    s.read_to_end(&mut buf).ok()?;
    (buf.len() >= HEADER_SIZE).then(|| t.elapsed())
}

/// A join of `name`: online uevent to event_done.
fn join(k: &FakeKernel, name: &str) -> Option<Duration> {
    let t = Instant::now();
    if !k.announce(name).ok()? {
        return None;
    }
    let path = format!("sys/kernel/dlm/{name}/event_done");
    k.wait_records(Duration::from_secs(20), |r| !writes(r, &path).is_empty())
        .then(|| t.elapsed())
}

fn us(d: Duration) -> u128 {
    d.as_micros()
}

/// One phase's numbers, as a table row.
fn phase(label: &str, k: &FakeKernel, tag: &str, pid: u32) {
    let t0 = cpu_ticks(pid);
    let wall = Instant::now();
    let mut lat: Vec<Duration> = Vec::new();
    let mut failed = 0;
    // a daemon that stops answering is not waited for 300 times (5 s each)
    for _ in 0..300 {
        match ls_query() {
            Some(d) => lat.push(d),
            None => failed += 1,
        }
        if failed == 10 {
            break;
        }
    }
    let mut joins: Vec<Option<Duration>> = Vec::new();
    for i in 0..5 {
        let j = join(k, &format!("{tag}{i}"));
        joins.push(j);
        if j.is_none() {
            break;
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let ticks = cpu_ticks(pid) - t0;
    #[allow(clippy::cast_precision_loss)]
    let cpu = ticks as f64 / wall.elapsed().as_secs_f64();
    lat.sort_unstable();
    let p = |per_mille: usize| lat.get((lat.len().max(1) - 1) * per_mille / 1000).copied();
    let ok: Vec<Duration> = joins.iter().flatten().copied().collect();
    let join_max = ok.iter().max().copied().unwrap_or_default();
    println!(
        "| {label} | {} µs | {} µs | {failed} | {}/5, max {} µs | {cpu:.0} % |",
        p(500).map_or(0, us),
        p(990).map_or(0, us),
        ok.len(),
        us(join_max)
    );
}

fn main() -> ExitCode {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    let Ok(ns) = Netns::new("fload") else {
        eprintln!("cannot create a network namespace (root?)");
        return ExitCode::FAILURE;
    };
    if enter_netns(&ns.0).is_err() {
        eprintln!("cannot enter {}", ns.0);
        return ExitCode::FAILURE;
    }
    let root = std::env::temp_dir().join(format!("dlm-fload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let Ok(k) = FakeKernel::start(&root) else {
        eprintln!("fake kernel");
        return ExitCode::FAILURE;
    };
    let here = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_default();
    let Ok(child) = ns
        .command("prlimit")
        .args(["--nofile=1024:1024", "--"])
        .arg(here.join("dlm_controld"))
        .args(["--kernel-root", &root.display().to_string()])
        .args(["--cluster", "embedded", "--foreground"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        eprintln!("cannot start dlm_controld");
        return ExitCode::FAILURE;
    };
    let d = Daemon(child);
    if !k.wait_daemon(Duration::from_secs(10)) {
        eprintln!("daemon did not come up");
        return ExitCode::FAILURE;
    }
    let pid = d.0.id();
    println!("| phase | ls p50 | ls p99 | ls failed | joins | daemon CPU |");
    println!("|---|---|---|---|---|---|");
    phase("no flood", &k, "quiet", pid);

    let Ok(flood) = Flood::start(&ns, &here.join("flood"), n) else {
        eprintln!("cannot start the flood");
        return ExitCode::FAILURE;
    };
    let label = format!(
        "uid 65534 holds {n} connections to each listener (made {:?})",
        flood.opened
    );
    phase(&label, &k, "flood", pid);
    drop(flood);
    drop(d);
    let _ = std::fs::remove_dir_all(&root);
    ExitCode::SUCCESS
}
