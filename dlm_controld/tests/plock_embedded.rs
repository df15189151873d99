//! The plock path on one node (embedded group) through the fake kernel's device: lock,
//! conflict, GET, a blocking lock granted by the unlock, CLOSE (no reply), CANCEL, an unknown
//! lockspace (-EEXIST), bad records dropped without losing the next, and replies to a burst
//! of non-blocking requests in request order.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::wire::global_id;
use dlm_tests::{Daemon, DaemonBuilder, FakeKernel, Netns, metric_in_ns};

const T: Duration = Duration::from_secs(20);

fn req(
    op: PlockOp,
    owner: u64,
    ex: bool,
    wait: bool,
    start: u64,
    end: u64,
    fsid: u32,
) -> PlockInfo {
    PlockInfo {
        version: PLOCK_VERSION,
        op,
        ex,
        wait,
        flags: PlockFlags(0),
        pid: u32::try_from(owner).expect("small") + 100,
        nodeid: 0,
        rv: 0,
        fsid,
        number: 5,
        start,
        end,
        owner,
    }
}

fn reply(k: &FakeKernel) -> PlockInfo {
    k.recv_plock(T).expect("a reply")
}

/// A daemon (embedded group, `extra` options) on a fake kernel under a fresh directory, in
/// a network namespace of its own, with lockspace `foo` joined; and foo's fsid.
fn start(tag: &str, extra: &[&str]) -> (PathBuf, FakeKernel, Netns, Daemon, u32) {
    start_with(tag, extra, "")
}

/// The same with `conf` as its dlm.conf.
fn start_with(tag: &str, extra: &[&str], conf: &str) -> (PathBuf, FakeKernel, Netns, Daemon, u32) {
    let (dir, k, ns, d) = daemon_alone(tag, extra, conf);
    assert!(k.announce("foo").expect("announce"));
    assert!(k.wait_joined("foo", T));
    let fsid = global_id(&LockspaceName::new(b"foo").expect("name"));
    (dir, k, ns, d, fsid)
}

/// A daemon as [`start_with`] starts it, with no lockspace yet.
fn daemon_alone(tag: &str, extra: &[&str], conf: &str) -> (PathBuf, FakeKernel, Netns, Daemon) {
    let dir: PathBuf = std::env::temp_dir().join(format!("dlm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let k = FakeKernel::start(&dir).expect("fake kernel");
    std::fs::create_dir_all(dir.join("etc/dlm")).expect("etc/dlm");
    std::fs::write(dir.join("etc/dlm/dlm.conf"), conf).expect("dlm.conf");
    let ns = Netns::new(tag).expect("netns");
    let d = DaemonBuilder::new(env!("CARGO_BIN_EXE_dlm_controld"), &dir)
        .embedded()
        .args(extra)
        .spawn(&ns.0)
        .expect("start dlm_controld");
    assert!(k.wait_daemon(T));
    (dir, k, ns, d)
}

#[test]
fn plocks_through_the_device() {
    let (dir, k, ns, _d, fsid) = start("plock", &[]);

    // owner 1 write-locks 0-9: granted, echoed with our nodeid
    let a = req(PlockOp::LOCK, 1, true, false, 0, 9, fsid);
    k.send_plock(&a).expect("send");
    assert_eq!(
        reply(&k),
        PlockInfo {
            nodeid: 1,
            rv: 0,
            ..a
        }
    );
    // owner 2 conflicts
    let b = req(PlockOp::LOCK, 2, true, false, 5, 5, fsid);
    k.send_plock(&b).expect("send");
    assert_eq!(reply(&k).rv, -11);
    // GET reports owner 1's lock
    let g = req(PlockOp::GET, 2, true, false, 0, 100, fsid);
    k.send_plock(&g).expect("send");
    let r = reply(&k);
    assert_eq!(
        (r.rv, r.start, r.end, r.pid, r.ex, r.owner),
        (1, 0, 9, 101, true, 2)
    );
    // owner 2 waits; owner 1's unlock is answered, then owner 2's lock
    let w = req(PlockOp::LOCK, 2, true, true, 5, 5, fsid);
    k.send_plock(&w).expect("send");
    assert!(
        k.recv_plock_raw(Duration::from_millis(300)).is_none(),
        "a blocked lock was answered"
    );
    let u = req(PlockOp::UNLOCK, 1, false, false, 0, 9, fsid);
    k.send_plock(&u).expect("send");
    assert_eq!(
        reply(&k),
        PlockInfo {
            nodeid: 1,
            rv: 0,
            ..u
        }
    );
    assert_eq!(
        reply(&k),
        PlockInfo {
            nodeid: 1,
            rv: 0,
            ..w
        }
    );
    // the waiter's time, read to reply written, counted once with its 300 ms of waiting
    let m = |s: &str| metric_in_ns(&ns.0, s);
    let waited = "dlm_plock_wait_seconds_{}{lockspace=\"foo\",outcome=\"granted\"}";
    assert_eq!(m(&waited.replace("{}", "count")), 1.0);
    assert!(m(&waited.replace("{}", "sum")) >= 0.3);
    let blocking = "dlm_plock_request_seconds_{}{lockspace=\"foo\",wait=\"true\"}";
    assert_eq!(m(&blocking.replace("{}", "count")), 1.0);
    assert!(m(&blocking.replace("{}", "sum")) >= 0.3);
    // close: no reply
    let c = PlockInfo {
        flags: PlockFlags(PlockFlags::CLOSE),
        ..req(
            PlockOp::UNLOCK,
            2,
            false,
            false,
            0,
            0x7fff_ffff_ffff_ffff,
            fsid,
        )
    };
    k.send_plock(&c).expect("send");
    // unknown lockspace: -EEXIST
    let x = req(PlockOp::LOCK, 3, true, false, 0, 0, fsid ^ 1);
    k.send_plock(&x).expect("send");
    assert_eq!(reply(&k).rv, -17);
    // bad records are dropped; the next request is still served
    k.send_plock_raw(&[0u8; 10]).expect("send");
    let mut bad = a.encode();
    bad[0] = 9; // version 9.x
    k.send_plock_raw(&bad).expect("send");
    let ok = req(PlockOp::GET, 4, true, false, 0, 100, fsid);
    k.send_plock(&ok).expect("send");
    assert_eq!(
        reply(&k),
        PlockInfo {
            nodeid: 1,
            rv: 0,
            ..ok
        },
        "the close really unlocked"
    );

    // CANCEL (kernels >= 6.6): an interrupted wait is removed (0) and its LOCK never
    // answered; a CANCEL that finds no waiter gets -ENOENT
    let hold = req(PlockOp::LOCK, 5, true, false, 0, 9, fsid);
    k.send_plock(&hold).expect("send");
    assert_eq!(reply(&k).rv, 0);
    let w = req(PlockOp::LOCK, 6, true, true, 5, 5, fsid);
    k.send_plock(&w).expect("send");
    assert!(k.recv_plock_raw(Duration::from_millis(300)).is_none());
    let cancel = PlockInfo {
        op: PlockOp::CANCEL,
        wait: false,
        ..w
    };
    k.send_plock(&cancel).expect("send");
    let r = reply(&k);
    assert_eq!((r.op, r.rv), (PlockOp::CANCEL, 0), "{r:?}");
    k.send_plock(&cancel).expect("send");
    let r = reply(&k);
    assert_eq!((r.op, r.rv), (PlockOp::CANCEL, -2), "{r:?}");
    let unlock = req(PlockOp::UNLOCK, 5, true, false, 0, 9, fsid);
    k.send_plock(&unlock).expect("send");
    assert_eq!(
        reply(&k).op,
        PlockOp::UNLOCK,
        "the cancelled LOCK is never granted"
    );
    assert!(k.recv_plock_raw(Duration::from_millis(300)).is_none());

    // a burst of non-blocking requests on one fsid: replies in request order
    let burst: Vec<PlockInfo> = (0..200u64)
        .map(|i| match i % 3 {
            0 => req(PlockOp::LOCK, 10 + i, i % 2 == 0, false, i, i + 10, fsid),
            1 => req(PlockOp::GET, 10 + i, true, false, 0, 1000, fsid),
            _ => req(PlockOp::UNLOCK, 10 + i - 2, false, false, 0, 1000, fsid),
        })
        .collect();
    for r in &burst {
        k.send_plock(r).expect("send");
    }
    for (i, r) in burst.iter().enumerate() {
        let got = reply(&k);
        // (a GET carries the conflicting lock's range and pid: compare op and owner)
        assert_eq!(
            (got.op, got.owner),
            (r.op, r.owner),
            "reply {i} out of order"
        );
    }
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `plock_rate_limit=5` (`-l 5`): of twelve requests queued at once, five are read and
/// answered in the first second and the rest only after it; none is lost.
#[test]
fn rate_limit_paces_the_reads() {
    let (dir, k, _ns, _d, fsid) = start("plrate", &["-l", "5"]);
    let sent = std::time::Instant::now();
    for i in 0..12u64 {
        let r = PlockInfo {
            number: 100 + i,
            ..req(PlockOp::LOCK, 1, true, false, 0, 9, fsid)
        };
        k.send_plock(&r).expect("send");
    }
    // the first window (it opens at the first read, after `sent`) answers five; the sixth
    // is read only once that window has closed, so not before `sent` + 1 s however slowly
    // the machine runs — less the window's millisecond granularity: it is measured in whole
    // milliseconds of the monotonic clock, as C's `limit_plocks` measures it, so it may end
    // up to a millisecond early (one run in about twenty failed a bound of exactly 1 s)
    let mut numbers = Vec::new();
    let mut sixth = None;
    for i in 0..12 {
        numbers.push(reply(&k).number);
        if i == 5 {
            sixth = Some(sent.elapsed());
        }
    }
    let sixth = sixth.expect("a sixth reply");
    assert!(
        sixth >= Duration::from_millis(998),
        "a sixth request was read within the first second ({sixth:?})"
    );
    assert_eq!(numbers, (100..112).collect::<Vec<u64>>());
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `plock_locks_max=2` in dlm.conf: once this node's processes hold two locks in `foo`, a
/// third LOCK is answered -ENOLCK (fcntl's ENOLCK), and so is an unlock that would cut a
/// lock in two, while one that only shrinks a lock or frees it goes through; freeing one
/// makes room again. The refusals are counted among the replies.
#[test]
fn a_node_at_plock_locks_max_gets_enolck() {
    let (dir, k, ns, _d, fsid) = start_with("plmax", &[], "plock_locks_max=2\n");
    let rv = |op, start, end| {
        k.send_plock(&req(op, 1, true, false, start, end, fsid))
            .expect("send");
        reply(&k).rv
    };
    let enolck = -dlm_proto::errno::ENOLCK;
    assert_eq!(rv(PlockOp::LOCK, 0, 9), 0);
    assert_eq!(rv(PlockOp::LOCK, 20, 29), 0);
    assert_eq!(rv(PlockOp::LOCK, 40, 49), enolck, "a third lock");
    assert_eq!(rv(PlockOp::UNLOCK, 3, 4), enolck, "a cut in two");
    assert_eq!(rv(PlockOp::UNLOCK, 0, 1), 0, "a shrink");
    assert_eq!(rv(PlockOp::GET, 40, 49), 0);
    assert_eq!(rv(PlockOp::UNLOCK, 2, 9), 0, "a free");
    assert_eq!(rv(PlockOp::LOCK, 40, 49), 0, "room again");
    let refused = metric_in_ns(
        &ns.0,
        "dlm_plock_replies_total{lockspace=\"foo\",result=\"enolck\"}",
    );
    assert!((refused - 2.0).abs() < f64::EPSILON, "{refused}");
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `plock_locks_max` follows `dlm_tool reload_config` in a lockspace already joined, and the
/// gauges show this node's locks beside the bound, so a monitor can warn before refusals.
#[test]
fn plock_locks_max_follows_reload_config() {
    let (dir, k, ns, _d, fsid) = start_with("plreload", &[], "plock_locks_max=1\n");
    let rv = |op, start, end| {
        k.send_plock(&req(op, 1, true, false, start, end, fsid))
            .expect("send");
        reply(&k).rv
    };
    let gauge = |name: &str| metric_in_ns(&ns.0, &format!("{name}{{lockspace=\"foo\"}}"));
    assert_eq!(rv(PlockOp::LOCK, 0, 9), 0);
    assert_eq!(rv(PlockOp::LOCK, 20, 29), -dlm_proto::errno::ENOLCK);
    assert_eq!(gauge("dlm_plock_own_locks"), 1.0);
    assert_eq!(gauge("dlm_plock_locks_max"), 1.0);
    reload_config(&dir, &ns.0, "plock_locks_max=3\n");
    // a scrape asks the lockspace's task itself, behind the new bound in its queue
    let deadline = std::time::Instant::now() + T;
    while gauge("dlm_plock_locks_max") != 3.0 {
        assert!(std::time::Instant::now() < deadline, "bound never reloaded");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(rv(PlockOp::LOCK, 20, 29), 0, "room after the reload");
    assert_eq!(rv(PlockOp::LOCK, 40, 49), 0);
    assert_eq!(rv(PlockOp::LOCK, 60, 69), -dlm_proto::errno::ENOLCK);
    assert_eq!(gauge("dlm_plock_own_locks"), 3.0);
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `plock_spin_us`: with a window, the device's reader tries reading on after each request
/// that came back quickly (each try counted: a request found, a window spent, or the CPU
/// wanted elsewhere; never with one CPU); with 0, after `dlm_tool reload_config`, it never
/// tries again.
#[test]
fn the_reader_spins_as_plock_spin_us_says_and_reload_config_turns_it_off() {
    let (dir, k, ns, _d, fsid) = start_with("plspin", &[], "plock_spin_us=1000\n");
    let spins = || -> f64 {
        ["request", "none", "busy", "turn"]
            .iter()
            .map(|o| metric_in_ns(&ns.0, &format!("dlm_plock_spins_total{{outcome=\"{o}\"}}")))
            .sum()
    };
    let pairs = |n: u64| {
        for i in 0..n {
            for op in [PlockOp::LOCK, PlockOp::UNLOCK] {
                k.send_plock(&req(op, 1, true, false, 10 * i, 10 * i + 1, fsid))
                    .expect("send");
                assert_eq!(reply(&k).rv, 0);
            }
        }
    };
    pairs(50);
    // the daemon runs on the CPUs this test may use
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    if cpus > 1 {
        assert!(
            spins() > 0.0,
            "a request back within 4 ms of the last is spun for"
        );
    } else {
        assert_eq!(spins(), 0.0, "never with one CPU");
    }
    reload_config(&dir, &ns.0, "plock_spin_us=0\n");
    // a spin already going ends within its millisecond
    std::thread::sleep(Duration::from_millis(50));
    let before = spins();
    pairs(50);
    assert_eq!(spins(), before, "no spin once the window is 0");
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Pins the calling thread (and so the processes it starts) to the first CPU it may use.
fn pin_to_one_cpu() {
    // SAFETY: a zeroed cpu_set_t is an empty set; both calls get its size and a pointer
    // to it, and 0 names the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = size_of::<libc::cpu_set_t>();
        assert_eq!(libc::sched_getaffinity(0, size, &raw mut set), 0);
        let first = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .expect("a CPU");
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(first, &mut set);
        assert_eq!(libc::sched_setaffinity(0, size, &raw const set), 0);
    }
}

/// With one CPU the reader never spins; after a wake-up that found requests it looks at
/// the device again once the daemon's other tasks have had their turn (each look counted,
/// whatever it found), and every request still gets its one reply in order. A C-compatible
/// lockspace, whose replies wait for a CPG round trip, is never looked for.
#[test]
fn with_one_cpu_the_reader_looks_instead_of_spinning() {
    pin_to_one_cpu();
    for (tag, conf, looked) in [
        ("pllook", "plock_spin_us=1000\n", true),
        ("pllook0", "plock_native=0\nplock_spin_us=1000\n", false),
    ] {
        let (dir, k, ns, _d, fsid) = start_with(tag, &[], conf);
        let sum = |name: &str, outcomes: &[&str]| -> f64 {
            outcomes
                .iter()
                .map(|o| metric_in_ns(&ns.0, &format!("{name}{{outcome=\"{o}\"}}")))
                .sum()
        };
        for i in 0..100 {
            for op in [PlockOp::LOCK, PlockOp::UNLOCK] {
                let r = req(op, 1, true, false, 10 * i, 10 * i + 1, fsid);
                k.send_plock(&r).expect("send");
                let got = reply(&k);
                assert_eq!((got.op, got.start, got.rv), (op, 10 * i, 0), "{tag}");
            }
        }
        let spins = sum(
            "dlm_plock_spins_total",
            &["request", "none", "busy", "turn"],
        );
        assert_eq!(spins, 0.0, "{tag}: never a spin with one CPU");
        let looks = sum("dlm_plock_looks_total", &["request", "none"]);
        assert_eq!(looks > 0.0, looked, "{tag}: {looks} looks");
        drop(k);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `plock_spin_us` in a C-compatible lockspace: every reply waits for a CPG round trip, so
/// the next request never comes within a window of the device emptying, and the reader
/// never tries (it did, and paid a look at the machine's load at most wake-ups).
#[test]
fn the_reader_never_spins_for_a_c_compatible_lockspace() {
    let (dir, k, ns, _d, fsid) = start_with("plspin0", &[], "plock_native=0\nplock_spin_us=1000\n");
    for i in 0..50 {
        for op in [PlockOp::LOCK, PlockOp::UNLOCK] {
            k.send_plock(&req(op, 1, true, false, 10 * i, 10 * i + 1, fsid))
                .expect("send");
            assert_eq!(reply(&k).rv, 0);
        }
    }
    for o in ["request", "none", "busy", "turn"] {
        let n = metric_in_ns(&ns.0, &format!("dlm_plock_spins_total{{outcome=\"{o}\"}}"));
        assert_eq!(n, 0.0, "{o}");
    }
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The hops of a request are measured: each request read is taken by its task once
/// (`dlm_plock_handoff_seconds`), and each message of ours comes back once
/// (`dlm_cpg_round_trip_seconds`, C-compatible here so every request is a message).
#[test]
fn each_hop_of_a_request_is_measured() {
    let (dir, k, ns, _d, fsid) = start_with("plhops", &[], "plock_native=0\n");
    for i in 0..5 {
        k.send_plock(&req(
            PlockOp::LOCK,
            1,
            true,
            false,
            10 * i,
            10 * i + 1,
            fsid,
        ))
        .expect("send");
        assert_eq!(reply(&k).rv, 0);
    }
    let m = |s: &str| metric_in_ns(&ns.0, &format!("{s}{{lockspace=\"foo\"}}"));
    assert_eq!(m("dlm_plock_handoff_seconds_count"), 5.0);
    let sent = m("dlm_cpg_messages_sent_total");
    assert!(sent >= 5.0, "{sent}");
    assert_eq!(m("dlm_cpg_round_trip_seconds_count"), sent);
    assert!(m("dlm_cpg_round_trip_seconds_sum") > 0.0);
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// dlm.conf replaced by `conf`, then our `dlm_tool reload_config` in `ns`.
fn reload_config(dir: &std::path::Path, ns: &str, conf: &str) {
    std::fs::write(dir.join("etc/dlm/dlm.conf"), conf).expect("dlm.conf");
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(our_tool())
        .arg("reload_config")
        .output()
        .expect("run dlm_tool");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "reload_config done\n");
}

/// Our dlm_tool, built beside this test by `cargo test --workspace`.
fn our_tool() -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let bin = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target dir")
        .join("dlm_tool");
    assert!(
        bin.exists(),
        "{}: run cargo build --workspace",
        bin.display()
    );
    bin
}

/// Requests read while the lockspace's task is still joining are queued for it; those read
/// once it runs are performed in place by the device's reader, but only after every one
/// queued before them: the replies come in the order the requests were sent (a request
/// read before the daemon knew the lockspace is answered -EEXIST at once, in its place).
#[test]
fn requests_sent_during_the_join_are_answered_in_order() {
    let (dir, k, _ns, _d) = daemon_alone("joinorder", &[], "");
    let fsid = global_id(&LockspaceName::new(b"foo").expect("name"));
    assert!(k.announce("foo").expect("announce"));
    // at once, while the task joins: each owner its own byte, none waits
    let n = 400u64;
    for owner in 1..=n {
        k.send_plock(&req(PlockOp::LOCK, owner, true, false, owner, owner, fsid))
            .expect("send");
    }
    let mut granted = 0;
    for owner in 1..=n {
        let r = reply(&k);
        assert_eq!(r.owner, owner, "reply out of order");
        if r.rv == 0 {
            granted += 1;
        } else {
            assert_eq!(
                (r.rv, granted),
                (-17, 0),
                "only before the lockspace was known"
            );
        }
    }
    assert!(granted > 0);
    assert!(k.wait_joined("foo", T));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A lockspace left while a process still waits in F_SETLKW (a forced leave): the waiter
/// is answered -EEXIST, as a request for a lockspace that is gone, instead of never; the
/// holder's lock needs no answer. Every request read from the kernel gets one reply.
#[test]
fn a_waiter_is_answered_when_its_lockspace_ends() {
    let (dir, k, ns, _d, fsid) = start("lsend", &[]);
    k.send_plock(&req(PlockOp::LOCK, 1, true, false, 0, 9, fsid))
        .expect("send");
    assert_eq!(reply(&k).rv, 0);
    k.send_plock(&req(PlockOp::LOCK, 2, true, true, 0, 9, fsid))
        .expect("send");
    assert!(
        k.recv_plock(Duration::from_millis(300)).is_none(),
        "owner 2 waits"
    );
    k.release("foo").expect("offline uevent");
    let r = reply(&k);
    assert_eq!((r.owner, r.wait, r.rv), (2, true, -17), "{r:?}");
    assert!(
        k.recv_plock(Duration::from_millis(300)).is_none(),
        "one reply only"
    );
    // the ended task left nothing in the daemon's backlog: a request for the gone
    // lockspace is read (and answered) with the backlog at 0
    std::thread::sleep(Duration::from_millis(100));
    k.send_plock(&req(PlockOp::LOCK, 3, true, false, 0, 9, fsid))
        .expect("send");
    assert_eq!(reply(&k).rv, -17);
    assert_eq!(metric_in_ns(&ns.0, "dlm_plock_backlog"), 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Log output that blocks (stderr a pipe nobody reads, with `-D -P` a line per request)
/// stalls no plock request: lines for syslog, the log file and stderr are written by a
/// thread of their own, never under the lock the plock path takes, and are dropped and
/// counted when it falls behind. It used to stop answering once the pipe was full.
#[test]
fn a_blocked_log_sink_stalls_no_plock_request() {
    let dir: PathBuf = std::env::temp_dir().join(format!("dlm-logblock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let ns = Netns::new("logblock").expect("netns");
    let mut child = ns
        .command(env!("CARGO_BIN_EXE_dlm_controld"))
        .args(["--kernel-root", &dir.display().to_string()])
        .args(["--cluster", "embedded", "-D", "-P"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dlm_controld");
    // held, never read: the pipe (64 KiB) fills
    let _stderr = child.stderr.take();
    let _d = Daemon(child);
    assert!(k.wait_daemon(T));
    assert!(k.announce("foo").expect("announce"));
    assert!(k.wait_joined("foo", T));
    let fsid = global_id(&LockspaceName::new(b"foo").expect("name"));
    // more lines than the writer's queue (8192) and the pipe hold together (a request
    // decided here logs its read line alone)
    for i in 0..12_000u64 {
        let start = 10 * i;
        k.send_plock(&req(PlockOp::LOCK, 1, true, false, start, start + 1, fsid))
            .expect("send");
        let r = k
            .recv_plock(T)
            .expect("a reply while the log sink is blocked");
        assert_eq!(r.rv, 0, "request {i}");
    }
    assert!(
        metric_in_ns(&ns.0, "dlm_log_lines_dropped_total") > 0.0,
        "the lines that found the queue full are counted"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The plock device breaking (the fake kernel's socket closed, so every read brings empty
/// records) ends the daemon with an error; it does not spin on the empty reads (which held
/// its one thread, so nothing else ended it).
#[test]
fn the_device_going_away_ends_the_daemon() {
    let (dir, k, _ns, mut d, fsid) = start("plgone", &[]);
    let a = req(PlockOp::LOCK, 1, true, false, 0, 9, fsid);
    k.send_plock(&a).expect("send");
    assert_eq!(reply(&k).rv, 0);
    assert!(k.close_plock());
    let status = d
        .wait_exit(T)
        .expect("the daemon did not end after its plock device closed");
    assert!(!status.success(), "a lost device is an error: {status:?}");
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}
