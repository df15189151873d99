//! `cargo bench -p dlm-cpg` (root): the raw group on real corosync, one node and three
//! nodes in network namespaces. Latency: one 100-byte message in flight, multicast to own
//! delivery. Throughput: a window of messages in flight for a few seconds, counting own
//! deliveries. Prints one table.

#![allow(
    missing_docs,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use dlm_cpg::{CorosyncGroup, Event, Group};
use support::{Cluster, Corosync, wait_for};

const NAME: &[u8] = b"dlm:bench\0";

fn wait_readable(g: &CorosyncGroup) {
    let fd = g.as_raw_fd().expect("fd");
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&raw mut p, 1, 1000) };
}

/// Own deliveries counted from the event queue.
fn own(g: &mut CorosyncGroup, me: u32) -> usize {
    let mut n = 0;
    while let Some(e) = g.poll_event() {
        if matches!(e, Event::Deliver { nodeid, .. } if nodeid == me) {
            n += 1;
        }
    }
    n
}

fn measure(g: &mut CorosyncGroup) -> (f64, f64, f64) {
    let me = g.local_nodeid();
    let payload = [7u8; 100];
    let mut lat = Vec::with_capacity(20_000);
    for i in 0..21_000 {
        let t = Instant::now();
        g.mcast(&payload).expect("mcast");
        loop {
            wait_readable(g);
            g.dispatch().expect("dispatch");
            if own(g, me) > 0 {
                break;
            }
        }
        if i >= 1000 {
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    lat.sort_by(f64::total_cmp);
    let p = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize];
    let (p50, p99) = (p(0.5), p(0.99));
    // throughput: keep 1024 in flight for 3 s
    let window = 1024usize;
    let mut in_flight = 0usize;
    let mut done = 0usize;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        while in_flight < window {
            g.mcast(&payload).expect("mcast");
            in_flight += 1;
        }
        g.flush().expect("flush");
        wait_readable(g);
        g.dispatch().expect("dispatch");
        let n = own(g, me);
        in_flight -= n;
        done += n;
    }
    let rate = done as f64 / start.elapsed().as_secs_f64();
    (p50, p99, rate)
}

fn receiver(mut g: CorosyncGroup, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                wait_readable(&g);
                if g.dispatch().is_err() {
                    break;
                }
                while g.poll_event().is_some() {}
            }
        })
        .expect("spawn receiver")
}

fn main() {
    println!("| cluster | latency p50 | latency p99 | msg/s, 1024 in flight |");
    println!("|---|---|---|---|");
    {
        let cs = Corosync::start("bench");
        let (p50, p99, rate) = cs.run(|| {
            let mut g = wait_for(Duration::from_secs(15), || {
                CorosyncGroup::join(NAME, false).ok()
            })
            .expect("join");
            measure(&mut g)
        });
        println!("| 1 node (knet, loopback) | {p50:.0} µs | {p99:.0} µs | {rate:.0} |");
    }
    {
        let c = Cluster::start("bench", 3);
        let join = |k: usize| {
            c.run(k, || {
                wait_for(Duration::from_secs(20), || {
                    CorosyncGroup::join(NAME, false).ok()
                })
                .expect("join")
            })
        };
        let mut g1 = join(1);
        let stop = Arc::new(AtomicBool::new(false));
        let r2 = receiver(join(2), stop.clone());
        let r3 = receiver(join(3), stop.clone());
        // wait until node 1 sees all three members
        wait_for(Duration::from_secs(20), || {
            g1.dispatch().ok()?;
            let mut n = 0;
            while let Some(e) = g1.poll_event() {
                if let Event::ConfChg { members, .. } = e {
                    n = members.len();
                }
            }
            (n == 3).then_some(())
        });
        let (p50, p99, rate) = measure(&mut g1);
        println!("| 3 nodes (udpu, namespaces) | {p50:.0} µs | {p99:.0} µs | {rate:.0} |");
        stop.store(true, Ordering::Relaxed);
        drop(g1);
        let _ = r2.join();
        let _ = r3.join();
    }
}
