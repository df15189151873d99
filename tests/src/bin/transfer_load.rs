//! `transfer_load [LOCKS]`: a node joining a lockspace that holds LOCKS plocks (default
//! 200,000) on two real corosync nodes (network namespaces, udpu): how long until the
//! joiner has the whole table and its join completes, and how promptly node 1's query
//! socket answers while node 1 streams that table. Needs root; finds `dlm_controld` next
//! to itself. Results: docs/BENCHMARKS.md.

#[path = "../../../cpg/tests/support/mod.rs"]
#[allow(
    clippy::all,
    clippy::pedantic,
    unused_qualifications,
    missing_debug_implementations
)]
mod support;

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::query::{Command as Cmd, DlmcHeader, QUERY_SOCK_NAME};
use dlm_tests::{FakeKernel, enter_netns, metric_in_ns, start_daemon_on_corosync};

fn query(cmd: Cmd) -> Option<Duration> {
    let t = Instant::now();
    let addr = SocketAddr::from_abstract_name(QUERY_SOCK_NAME).ok()?;
    let mut s = UnixStream::connect_addr(&addr).ok()?;
    let mut h = DlmcHeader::new(cmd);
    h.data = 128;
    s.write_all(&h.encode()).ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    Some(t.elapsed())
}

fn main() -> ExitCode {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let c = support::Cluster::start("xfer", 2);
    let base = std::env::temp_dir().join(format!("dlm-xfer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let mut kernels = Vec::new();
    let mut daemons = Vec::new();
    for k in 1..=2 {
        let root = base.join(format!("n{k}"));
        let Ok(fk) = FakeKernel::start(&root) else {
            return ExitCode::FAILURE;
        };
        let bin = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("dlm_controld")))
            .unwrap_or_default();
        let Some(d) = start_daemon_on_corosync(&c.node_ns(k), &bin, &root, &fk, &[]) else {
            eprintln!("daemon {k} did not come up");
            return ExitCode::FAILURE;
        };
        kernels.push(fk);
        daemons.push(d);
    }
    let (k1, k2) = (&kernels[0], &kernels[1]);
    if !(k1.announce("big").unwrap_or(false) && k1.wait_joined("big", Duration::from_secs(30))) {
        eprintln!("node 1 did not join");
        return ExitCode::FAILURE;
    }
    let Ok(name) = LockspaceName::new(b"big") else {
        return ExitCode::FAILURE;
    };
    let fsid = dlm_proto::wire::global_id(&name);
    let t = Instant::now();
    let lock = |i: u64| PlockInfo {
        version: PLOCK_VERSION,
        op: PlockOp::LOCK,
        ex: true,
        wait: false,
        flags: PlockFlags(0),
        pid: 7,
        nodeid: 0,
        rv: 0,
        fsid,
        number: i,
        start: 0,
        end: 99,
        owner: 7,
    };
    if !k1.send_answered((0..n).map(lock), 256, Duration::from_secs(30)) {
        eprintln!("a lock was not answered");
        return ExitCode::FAILURE;
    }
    println!(
        "node 1 holds {n} locks ({:.1} s to take them over corosync)",
        t.elapsed().as_secs_f64()
    );

    // node 2 joins; meanwhile node 1's query socket is asked over and over
    let stop = Arc::new(AtomicBool::new(false));
    let ns1 = c.node_ns(1);
    let prober = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut lat = Vec::new();
            let mut other = Vec::new();
            if enter_netns(&ns1).is_err() {
                return (lat, other);
            }
            while !stop.load(Ordering::Relaxed) {
                if let Some(d) = query(Cmd::LOCKSPACES) {
                    lat.push(d);
                }
                if let Some(d) = query(Cmd::DUMP_STATUS) {
                    other.push(d);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            (lat, other)
        })
    };
    let t = Instant::now();
    let ok = k2.announce("big").unwrap_or(false) && k2.wait_joined("big", Duration::from_secs(300));
    let started = t.elapsed();
    if !ok {
        stop.store(true, Ordering::Relaxed);
        eprintln!("node 2 did not complete its join");
        return ExitCode::FAILURE;
    }
    // the kernel lockspace starts before the table arrives; a request made now is held
    // until node 2 has the whole table, then sees node 1's lock on the last inode
    let g = PlockInfo {
        version: PLOCK_VERSION,
        op: PlockOp::GET,
        ex: true,
        wait: false,
        flags: PlockFlags(0),
        pid: 9,
        nodeid: 0,
        rv: 0,
        fsid,
        number: n - 1,
        start: 0,
        end: 99,
        owner: 9,
    };
    let _ = k2.send_plock(&g);
    let rep = k2
        .recv_plock_raw(Duration::from_secs(300))
        .and_then(|b| PlockInfo::decode(&b).ok());
    let took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (mut lat, mut other) = prober.join().unwrap_or_default();
    // (a GET reply carries the holder's pid and range; C leaves nodeid as the asker's)
    let seen = rep.is_some_and(|r| r.rv == 1 && r.pid == 7);
    println!(
        "node 2: lockspace started after {:.3} s; whole table there after {:.2} s ({:.0} locks/s); node 1's last lock seen on node 2: {seen}",
        started.as_secs_f64(),
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
    other.sort_unstable();
    if let Some(m) = other.last() {
        println!(
            "node 1 DUMP_STATUS (no lockspace task involved) during the transfer: {} answered, max {} us",
            other.len(),
            m.as_micros()
        );
    }
    let ns1 = c.node_ns(1);
    let ns2 = c.node_ns(2);
    println!(
        "metrics: node 1 sent {} PLOCKS_DATA messages, corosync said TRY_AGAIN {} times; node 2 waited {:.2} s for the state (dlm_plock_transfer_seconds_sum)",
        metric_in_ns(
            &ns1,
            "dlm_plock_transfer_messages_total{lockspace=\"big\",role=\"sent\"}"
        ),
        metric_in_ns(&ns1, "dlm_cpg_try_again_total{lockspace=\"big\"}"),
        metric_in_ns(&ns2, "dlm_plock_transfer_seconds_sum{lockspace=\"big\"}"),
    );
    lat.sort_unstable();
    if !lat.is_empty() {
        let p = |pm: usize| lat[(lat.len() - 1) * pm / 1000].as_micros();
        println!(
            "node 1 LOCKSPACES queries during the transfer: {} answered, p50 {} us, p99 {} us, max {} us",
            lat.len(),
            p(500),
            p(990),
            p(1000)
        );
    }
    drop(daemons);
    drop(kernels);
    drop(c);
    let _ = std::fs::remove_dir_all(&base);
    if seen {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
