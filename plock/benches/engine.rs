//! `cargo bench -p dlm-plock`: the engine side by side with the reference list model (C's
//! representation, `tests/model`), printing one table. Each case builds its state, then
//! times a batch of operations; the model runs fewer operations where it is slow, and both
//! report time per operation. Memory is measured by a counting allocator.
//!
//! `DLM_BENCH_QUICK=1` runs every case at small sizes (a smoke test of the harness).

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss
)]
#![allow(clippy::cast_precision_loss, clippy::too_many_arguments, missing_docs)]

#[path = "../tests/model/mod.rs"]
mod model;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dlm_plock::Lockspace;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_testkit::Rng;
use model::Model;

struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged and only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new, Ordering::Relaxed);
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const FSID: u32 = 1;
/// Keys the engine's index shapes, as the daemon's per-process random seed does.
const SEED: u64 = 0x0123_4567_89ab_cdef;

fn req(
    node: i32,
    owner: u64,
    ino: u64,
    op: PlockOp,
    ex: bool,
    wait: bool,
    start: u64,
    end: u64,
) -> PlockInfo {
    PlockInfo {
        version: PLOCK_VERSION,
        op,
        ex,
        wait,
        flags: PlockFlags(0),
        pid: owner as u32,
        nodeid: node,
        rv: 0,
        fsid: FSID,
        number: ino,
        start,
        end,
        owner,
    }
}

fn per_op(d: Duration, ops: u64) -> f64 {
    d.as_secs_f64() * 1e9 / ops as f64
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn row(case: &str, engine: f64, model: Option<f64>) {
    match model {
        Some(m) => println!(
            "| {case} | {} | {} | {:.0}× |",
            fmt_ns(engine),
            fmt_ns(m),
            m / engine
        ),
        None => println!("| {case} | {} | — | — |", fmt_ns(engine)),
    }
}

/// Lock and unlock one byte of a random existing resource, by a second owner.
fn lock_unlock_engine(ls: &mut Lockspace, resources: u64, ops: u64, rng: &mut Rng) -> f64 {
    let mut out = Vec::new();
    let t = Instant::now();
    for _ in 0..ops {
        let ino = rng.next(resources);
        ls.apply(
            0,
            1,
            &req(1, 2, ino, PlockOp::LOCK, true, false, 100, 100),
            &mut out,
        )
        .expect("valid");
        ls.apply(
            0,
            1,
            &req(1, 2, ino, PlockOp::UNLOCK, false, false, 100, 100),
            &mut out,
        )
        .expect("valid");
        out.clear();
    }
    per_op(t.elapsed(), ops)
}

fn lock_unlock_model(m: &mut Model, resources: u64, ops: u64, rng: &mut Rng) -> f64 {
    let mut mout: Vec<PlockInfo> = Vec::new();
    let t = Instant::now();
    for _ in 0..ops {
        let ino = rng.next(resources);
        m.apply(
            &req(1, 2, ino, PlockOp::LOCK, true, false, 100, 100),
            &mut mout,
        );
        m.apply(
            &req(1, 2, ino, PlockOp::UNLOCK, false, false, 100, 100),
            &mut mout,
        );
        mout.clear();
    }
    per_op(t.elapsed(), ops)
}

/// Starts such that slot i's start ranks as the unseeded priority of slot i (splitmix64 of
/// the slot, the index's fixed priorities before they were seeded): inserted in slot order
/// they sorted keys as priorities, so that treap was a chain.
fn adversarial_starts(n: u64) -> Vec<u64> {
    let mix = |x: u64| {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut by_priority: Vec<u64> = (0..n).collect();
    by_priority.sort_unstable_by_key(|&s| mix(s));
    let mut starts = vec![0; n as usize];
    for (rank, &s) in by_priority.iter().enumerate() {
        starts[s as usize] = 4 * rank as u64;
    }
    starts
}

/// Locks one range per start on one inode (one owner each), in the given order; then lock
/// and unlock a free byte among them. Per-op times of both.
fn ranges_in_order(starts: &[u64], rng: &mut Rng) -> (f64, f64) {
    let mut ls = Lockspace::new(1, FSID, SEED);
    let mut out = Vec::new();
    let t = Instant::now();
    for (k, &start) in starts.iter().enumerate() {
        let r = req(
            1,
            10 + k as u64,
            7,
            PlockOp::LOCK,
            true,
            false,
            start,
            start + 1,
        );
        ls.apply(0, 1, &r, &mut out).expect("valid");
        out.clear();
    }
    let build = per_op(t.elapsed(), starts.len() as u64);
    let ops = 20_000;
    let t = Instant::now();
    for k in 0..ops {
        let b = 4 * rng.next(starts.len() as u64) + 2;
        let owner = 1_000_000 + k;
        for (op, ex) in [(PlockOp::LOCK, true), (PlockOp::UNLOCK, false)] {
            ls.apply(0, 1, &req(1, owner, 7, op, ex, false, b, b), &mut out)
                .expect("valid");
        }
        out.clear();
    }
    (build, per_op(t.elapsed(), ops))
}

fn fill_resources(n: u64) -> (Lockspace, Model) {
    let mut ls = Lockspace::new(1, FSID, SEED);
    let mut m = Model::new(1, FSID);
    let mut out = Vec::new();
    let mut mout: Vec<PlockInfo> = Vec::new();
    for ino in 0..n {
        let r = req(1, 1, ino, PlockOp::LOCK, true, false, 0, 9);
        ls.apply(0, 1, &r, &mut out).expect("valid");
        if n <= 100_000 {
            m.apply(&r, &mut mout);
        }
        out.clear();
    }
    if n > 100_000 {
        // the model's resource list is only ever scanned; build it directly
        for ino in 0..n {
            m.res.push(model::MRes {
                number: ino,
                locks: vec![model::MLock {
                    start: 0,
                    end: 9,
                    owner: 1,
                    nodeid: 1,
                    pid: 1,
                    ex: true,
                }],
                waiters: Vec::new(),
            });
        }
    }
    (ls, m)
}

fn main() {
    let quick = std::env::var("DLM_BENCH_QUICK").is_ok_and(|v| v == "1");
    let scale = |n: u64| if quick { n.min(2_000) } else { n };
    let mut rng = Rng::from_state(0x1234_5678);
    println!("| case | engine | list model (C) | speed-up |");
    println!("|---|---|---|---|");

    // 1. lock+unlock among many resources
    for n in [1_000u64, 10_000, 100_000, 1_000_000] {
        let n = scale(n);
        let (mut ls, mut m) = fill_resources(n);
        let e = lock_unlock_engine(&mut ls, n, scale(200_000), &mut rng);
        let model_ops = (20_000_000 / n).clamp(20, 20_000);
        let mo = lock_unlock_model(&mut m, n, model_ops, &mut rng);
        row(&format!("lock+unlock, {n} resources"), e, Some(mo));
    }

    // 2. many locks on one inode from many owners (Samba tdb: one byte per record)
    for n in [100u64, 1_000, 10_000, 100_000] {
        let n = scale(n);
        let mut ls = Lockspace::new(1, FSID, SEED);
        let mut m = Model::new(1, FSID);
        let mut out = Vec::new();
        let mut mout: Vec<PlockInfo> = Vec::new();
        for k in 0..n {
            let r = req(
                1 + (k % 3) as i32,
                10 + k,
                7,
                PlockOp::LOCK,
                true,
                false,
                2 * k,
                2 * k,
            );
            ls.apply(0, r.nodeid as u32, &r, &mut out).expect("valid");
            m.apply(&r, &mut mout);
        }
        let ops = scale(100_000);
        let t = Instant::now();
        for k in 0..ops {
            let b = 2 * rng.next(n) + 1;
            let owner = 1_000_000 + k;
            ls.apply(
                0,
                1,
                &req(1, owner, 7, PlockOp::LOCK, true, false, b, b),
                &mut out,
            )
            .expect("valid");
            ls.apply(
                0,
                1,
                &req(1, owner, 7, PlockOp::UNLOCK, false, false, b, b),
                &mut out,
            )
            .expect("valid");
            out.clear();
        }
        let e = per_op(t.elapsed(), ops);
        let model_ops = (2_000_000 / n).clamp(20, 20_000);
        let t = Instant::now();
        for k in 0..model_ops {
            let b = 2 * rng.next(n) + 1;
            let owner = 1_000_000 + k;
            m.apply(
                &req(1, owner, 7, PlockOp::LOCK, true, false, b, b),
                &mut mout,
            );
            m.apply(
                &req(1, owner, 7, PlockOp::UNLOCK, false, false, b, b),
                &mut mout,
            );
            mout.clear();
        }
        let mo = per_op(t.elapsed(), model_ops);
        row(&format!("lock+unlock, {n} locks on one inode"), e, Some(mo));
    }

    // 2b. a user's chosen order: disjoint ranges on one inode, ascending, and in the order
    // of the fixed treap priorities the index had before its seed (each lock went down a
    // chain; 3·10^4 of them overflowed a 2 MiB stack)
    for n in [10_000u64, 30_000] {
        let n = scale(n);
        for (name, starts) in [
            ("ascending", (0..n).map(|k| 4 * k).collect()),
            ("adversarial", adversarial_starts(n)),
        ] {
            let (build, pair) = ranges_in_order(&starts, &mut rng);
            row(
                &format!("lock of {n} ranges on one inode, {name} order (then lock+unlock)"),
                build,
                None,
            );
            row(&format!("lock+unlock among them, {name} order"), pair, None);
        }
    }

    // 3. 10^4 waiters on one inode: every LOCK/UNLOCK there runs the waiter pass
    {
        let n = scale(10_000);
        let mut ls = Lockspace::new(1, FSID, SEED);
        let mut m = Model::new(1, FSID);
        let mut out = Vec::new();
        let mut mout: Vec<PlockInfo> = Vec::new();
        let holder = req(2, 1, 9, PlockOp::LOCK, true, false, 0, 1_000_000);
        ls.apply(0, 2, &holder, &mut out).expect("valid");
        m.apply(&holder, &mut mout);
        for k in 0..n {
            let w = req(
                1 + (k % 3) as i32,
                100 + k,
                9,
                PlockOp::LOCK,
                true,
                true,
                k,
                k,
            );
            ls.apply(0, w.nodeid as u32, &w, &mut out).expect("valid");
            m.apply(&w, &mut mout);
        }
        let ops = scale(100_000);
        let t = Instant::now();
        for k in 0..ops {
            let b = 2_000_000 + k;
            ls.apply(
                0,
                3,
                &req(3, 7, 9, PlockOp::LOCK, false, false, b, b),
                &mut out,
            )
            .expect("valid");
            ls.apply(
                0,
                3,
                &req(3, 7, 9, PlockOp::UNLOCK, false, false, b, b),
                &mut out,
            )
            .expect("valid");
            out.clear();
        }
        let e = per_op(t.elapsed(), ops);
        let model_ops = 200;
        let t = Instant::now();
        for k in 0..model_ops {
            let b = 2_000_000 + k;
            m.apply(&req(3, 7, 9, PlockOp::LOCK, false, false, b, b), &mut mout);
            m.apply(
                &req(3, 7, 9, PlockOp::UNLOCK, false, false, b, b),
                &mut mout,
            );
            mout.clear();
        }
        let mo = per_op(t.elapsed(), model_ops);
        row(
            &format!("lock+unlock beside {n} waiters on one inode"),
            e,
            Some(mo),
        );
        // then release them all: one unlock grants every waiter
        let t = Instant::now();
        ls.apply(
            0,
            2,
            &req(2, 1, 9, PlockOp::UNLOCK, false, false, 0, 1_000_000),
            &mut out,
        )
        .expect("valid");
        let e = per_op(t.elapsed(), 1);
        assert_eq!(ls.waiter_count(), 0);
        let t = Instant::now();
        m.apply(
            &req(2, 1, 9, PlockOp::UNLOCK, false, false, 0, 1_000_000),
            &mut mout,
        );
        let mo = per_op(t.elapsed(), 1);
        row(&format!("unlock granting {n} waiters"), e, Some(mo));
    }

    // 4. purge of a node holding 10^5 (then 10^3) locks in a table of 10^6
    for share in [10u64, 1000] {
        let total = scale(1_000_000);
        let theirs = total / share;
        let mut ls = Lockspace::new(1, FSID, SEED);
        let mut out = Vec::new();
        let mut mout: Vec<PlockInfo> = Vec::new();
        for ino in 0..total {
            let node = if ino < theirs { 2 } else { 1 };
            ls.apply(
                0,
                node as u32,
                &req(node, 1, ino, PlockOp::LOCK, true, false, 0, 9),
                &mut out,
            )
            .expect("valid");
        }
        let t = Instant::now();
        let purged = ls.purge_node(0, 2, &mut out);
        let e = per_op(t.elapsed(), 1);
        assert_eq!(purged as u64, theirs);
        let mut m = Model::new(1, FSID);
        for ino in 0..total {
            let node = if ino < theirs { 2 } else { 1 };
            m.res.push(model::MRes {
                number: ino,
                locks: vec![model::MLock {
                    start: 0,
                    end: 9,
                    owner: 1,
                    nodeid: node,
                    pid: 1,
                    ex: true,
                }],
                waiters: Vec::new(),
            });
        }
        let t = Instant::now();
        m.purge(2, &mut mout);
        let mo = per_op(t.elapsed(), 1);
        row(
            &format!("purge a node holding {theirs} of {total} locks"),
            e,
            Some(mo),
        );
    }

    // 5. snapshot, restore and dump of 10^6 locks; memory per lock
    {
        let n = scale(1_000_000);
        let before = ALLOCATED.load(Ordering::Relaxed);
        let (ls, _) = {
            let mut ls = Lockspace::new(1, FSID, SEED);
            let mut out = Vec::new();
            // 10 locks per resource, from several owners
            for k in 0..n {
                let ino = k / 10;
                let b = 10 * (k % 10);
                ls.apply(
                    0,
                    1,
                    &req(1, k % 10, ino, PlockOp::LOCK, true, false, b, b + 4),
                    &mut out,
                )
                .expect("valid");
                // the replies go to the kernel: not part of the table
                out.clear();
            }
            (ls, ())
        };
        let bytes = ALLOCATED.load(Ordering::Relaxed).saturating_sub(before);
        println!(
            "| memory, {n} locks (10 per resource) | {:.0} bytes/lock | — | — |",
            bytes as f64 / n as f64
        );
        let one_before = ALLOCATED.load(Ordering::Relaxed);
        let mut single = Lockspace::new(1, FSID, SEED);
        let mut out = Vec::new();
        for ino in 0..n {
            single
                .apply(
                    0,
                    1,
                    &req(1, 1, ino, PlockOp::LOCK, true, false, 0, 9),
                    &mut out,
                )
                .expect("valid");
            out.clear();
        }
        let one_bytes = ALLOCATED.load(Ordering::Relaxed).saturating_sub(one_before);
        println!(
            "| memory, {n} locks (1 per resource) | {:.0} bytes/lock | — | — |",
            one_bytes as f64 / n as f64
        );
        println!(
            "| memory as the table counts itself (approx_heap_bytes), 1 per resource | {:.0} bytes/lock | — | — |",
            single.approx_heap_bytes() as f64 / n as f64
        );
        drop(single);
        let t = Instant::now();
        let chunks: Vec<_> = ls.snapshot().collect();
        let e = per_op(t.elapsed(), 1);
        row(
            &format!("snapshot of {n} locks ({} messages)", chunks.len()),
            e,
            None,
        );
        let t = Instant::now();
        let mut joiner = Lockspace::new(2, FSID, SEED ^ 1);
        for c in &chunks {
            joiner
                .restore(0, c.resource, c.entries())
                .expect("restores");
        }
        let e = per_op(t.elapsed(), 1);
        assert_eq!(joiner.digest(), ls.digest());
        row(&format!("restore of {n} locks"), e, None);
        let t = Instant::now();
        let mut text = 0usize;
        for line in ls.dump(0) {
            text += black_box(line.to_string()).len();
        }
        let e = per_op(t.elapsed(), 1);
        row(
            &format!("dump of {n} locks ({} MiB of text)", text >> 20),
            e,
            None,
        );
    }
}
