//! `query_load [SECONDS]`: how promptly the query socket answers while a plock storm runs.
//! One daemon (embedded group) on a fake kernel in a network namespace of its own; a
//! thread drives LOCK/UNLOCK pairs through the plock device in windows of 256 requests,
//! while this thread asks `dlm_tool ls`'s two queries (LOCKSPACES, LOCKSPACE_NODES) and
//! DUMP_STATUS over and over. Prints latency percentiles idle and under the storm, and the
//! storm's rate. Needs root; finds `dlm_controld` next to itself. Results: docs/BENCHMARKS.md.

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::query::{Command, DlmcHeader, HEADER_SIZE, NodesKind, QUERY_SOCK_NAME};
use dlm_tests::{DaemonBuilder, FakeKernel, Netns, enter_netns};

/// One query, reply read to the end; its duration.
fn query(h: &DlmcHeader) -> Option<Duration> {
    let t = Instant::now();
    let addr = SocketAddr::from_abstract_name(QUERY_SOCK_NAME).ok()?;
    let mut s = UnixStream::connect_addr(&addr).ok()?;
    s.write_all(&h.encode()).ok()?;
    let mut buf = Vec::with_capacity(HEADER_SIZE + 4096);
    s.read_to_end(&mut buf).ok()?;
    Some(t.elapsed())
}

fn round(name: &[u8]) -> Option<Duration> {
    let mut ls = DlmcHeader::new(Command::LOCKSPACES);
    ls.data = 128;
    let mut nodes = DlmcHeader::new(Command::LOCKSPACE_NODES).with_name(name);
    nodes.option = NodesKind::Members.to_raw();
    nodes.data = 128;
    let a = query(&ls)?;
    let b = query(&nodes)?;
    let c = query(&DlmcHeader::new(Command::DUMP_STATUS))?;
    Some(a + b + c)
}

fn percentiles(label: &str, mut v: Vec<Duration>) {
    v.sort_unstable();
    if v.is_empty() {
        println!("{label}: no samples");
        return;
    }
    // nearest-rank percentile, `per_mille` in 0..=1000
    let p = |per_mille: usize| v[(v.len() - 1) * per_mille / 1000].as_micros();
    println!(
        "{label}: {} rounds (LOCKSPACES + LOCKSPACE_NODES + DUMP_STATUS), p50 {} us, p99 {} us, max {} us",
        v.len(),
        p(500),
        p(990),
        p(1000)
    );
}

fn main() -> ExitCode {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let Ok(ns) = Netns::new("qload") else {
        eprintln!("cannot create a network namespace (root?)");
        return ExitCode::FAILURE;
    };
    if enter_netns(&ns.0).is_err() {
        eprintln!("cannot enter {}", ns.0);
        return ExitCode::FAILURE;
    }
    let root = std::env::temp_dir().join(format!("dlm-qload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let Ok(k) = FakeKernel::start(&root) else {
        eprintln!("fake kernel");
        return ExitCode::FAILURE;
    };
    // `QL_CONF="clients_cpu_budget_us=0"`: dlm.conf lines for the daemon
    if let Ok(conf) = std::env::var("QL_CONF") {
        let dir = root.join("etc/dlm");
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("dlm.conf"), format!("{conf}\n")));
        if written.is_err() {
            eprintln!("cannot write {}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("dlm_controld")))
        .unwrap_or_default();
    let Ok(d) = DaemonBuilder::new(&bin, &root).embedded().spawn(&ns.0) else {
        eprintln!("cannot start {}", bin.display());
        return ExitCode::FAILURE;
    };
    let _d = d;
    if !k.wait_daemon(Duration::from_secs(10)) || !k.announce("bench").unwrap_or(false) {
        eprintln!("daemon did not come up");
        return ExitCode::FAILURE;
    }
    if !k.wait_joined("bench", Duration::from_secs(10)) {
        eprintln!("join did not complete");
        return ExitCode::FAILURE;
    }
    let Ok(name) = LockspaceName::new(b"bench") else {
        return ExitCode::FAILURE;
    };
    let fsid = dlm_proto::wire::global_id(&name);

    let mut idle = Vec::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs.max(1)) / 2 {
        if let Some(d) = round(b"bench") {
            idle.push(d);
        }
    }
    percentiles("idle        ", idle);

    let k = Arc::new(k);
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let storm = {
        let (k, stop, ops) = (k.clone(), stop.clone(), ops.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for i in 0..128u64 {
                    for op in [PlockOp::LOCK, PlockOp::UNLOCK] {
                        let r = PlockInfo {
                            version: PLOCK_VERSION,
                            op,
                            ex: true,
                            wait: false,
                            flags: PlockFlags(0),
                            pid: 7,
                            nodeid: 0,
                            rv: 0,
                            fsid,
                            number: (n + i) % 10_000,
                            start: 0,
                            end: 99,
                            owner: 7,
                        };
                        if k.send_plock(&r).is_err() {
                            return;
                        }
                    }
                }
                for _ in 0..256 {
                    if k.recv_plock_raw(Duration::from_secs(10)).is_none() {
                        return;
                    }
                }
                n += 128;
                ops.fetch_add(256, Ordering::Relaxed);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let mut busy = Vec::new();
    let t = Instant::now();
    let before = ops.load(Ordering::Relaxed);
    while t.elapsed() < Duration::from_secs(secs.max(1)) / 2 {
        if let Some(d) = round(b"bench") {
            busy.push(d);
        }
    }
    let rate = (ops.load(Ordering::Relaxed) - before) as f64 / t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = storm.join();
    percentiles("plock storm ", busy);
    println!("storm: {rate:.0} plock requests/s answered during the measurement");
    let _ = std::fs::remove_dir_all(&root);
    ExitCode::SUCCESS
}
