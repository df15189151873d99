//! `demo_cluster`: the main job. A three-node cluster on this one machine: three network
//! namespaces on a bridge, real corosync in each, our dlm_controld on a fake kernel in each
//! (fencing on, with a demo fence agent that records what it was asked and takes three
//! seconds to "power off" the node). It joins a lockspace everywhere,
//! takes POSIX locks from all three nodes (one conflicting request waits), shows
//! `dlm_tool ls` and `dlm_tool plocks` on every node (the same table on each), releases the
//! lock so the waiter on another node is granted, then kills node 3 outright and shows the
//! survivors waiting until node 1 has fenced it, then recovering without it, its locks
//! purged. Exits non-zero if anything the demo claims does not happen.
//!
//! Run by `scripts/demo.sh` (as root). Finds `dlm_controld` and `dlm_tool` next to itself.

#[path = "../../../cpg/tests/support/mod.rs"]
#[allow(
    clippy::all,
    clippy::pedantic,
    unused_qualifications,
    missing_debug_implementations
)]
mod support;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_tests::{
    FakeKernel, Record, configfs_members, settle_post_join_delay, start_daemon_on_corosync,
    stdout_in_ns,
};

const T: Duration = Duration::from_secs(30);
const LS: &str = "demo";
/// `global_id("demo")`, the fsid the kernel would put in each request.
fn fsid() -> u32 {
    dlm_proto::wire::global_id(
        &dlm_proto::LockspaceName::new(LS.as_bytes())
            .unwrap_or_else(|_| unreachable!("a valid name")),
    )
}

struct Demo {
    failures: Vec<String>,
}

impl Demo {
    fn check(&mut self, ok: bool, what: &str) {
        println!("  [{}] {what}", if ok { "ok" } else { "FAILED" });
        if !ok {
            self.failures.push(what.to_owned());
        }
    }
}

fn bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default()
}

fn tool(ns: &str, args: &[&str]) -> String {
    stdout_in_ns(ns, &bin_dir().join("dlm_tool").display().to_string(), args)
}

fn show(title: &str, text: &str) {
    println!("  --- {title}");
    for l in text.lines() {
        println!("  | {l}");
    }
}

#[allow(clippy::too_many_arguments)]
fn req(
    op: PlockOp,
    ex: bool,
    wait: bool,
    pid: u32,
    number: u64,
    start: u64,
    end: u64,
) -> PlockInfo {
    PlockInfo {
        version: PLOCK_VERSION,
        op,
        ex,
        wait,
        flags: PlockFlags(0),
        pid,
        nodeid: 0,
        rv: 0,
        fsid: fsid(),
        number,
        start,
        end,
        owner: u64::from(pid),
    }
}

/// The demo's fence agent: reads its `key=val` stdin as every agent does, takes three
/// seconds, records the request in the file its `log=` argument names, and succeeds.
const AGENT: &str = "#!/bin/sh
input=$(cat)
log=$(printf '%s\\n' \"$input\" | sed -n 's/^log=//p')
sleep 3
printf '%s\\n' \"$input\" >> \"$log\"
";

/// Writes the agent and each node's dlm.conf (`fence_all <agent> log=<file>`); returns the
/// agent's record file.
fn fence_setup(base: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(base)?;
    let agent = base.join("demo-fence-agent");
    std::fs::write(&agent, AGENT)?;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))?;
    let log = base.join("fenced");
    for k in 1..=3 {
        let etc = base.join(format!("n{k}/etc/dlm"));
        std::fs::create_dir_all(&etc)?;
        std::fs::write(
            etc.join("dlm.conf"),
            format!("fence_all {} log={}\n", agent.display(), log.display()),
        )?;
    }
    Ok(log)
}

/// A progress line before a wait of more than a moment.
fn progress(what: &str) {
    use std::io::Write;
    println!("  ... waiting: {what}");
    let _ = std::io::stdout().flush();
}

/// Polls `what` every 100 ms for up to `limit` until it returns `Some`.
fn poll<T>(limit: Duration, mut what: impl FnMut() -> Option<T>) -> Option<T> {
    let end = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = what() {
            return Some(v);
        }
        if std::time::Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Each node's simulated processes send `per_node` requests (lock, then unlock, of a range
/// of their own on inode 200, 16 in flight), all nodes at once; returns the replies that
/// came back and the seconds it took.
fn burst(kernels: &[FakeKernel], per_node: u64) -> (usize, f64) {
    let t = std::time::Instant::now();
    let answered = std::thread::scope(|s| {
        let handles: Vec<_> = kernels
            .iter()
            .enumerate()
            .map(|(i, k)| {
                s.spawn(move || {
                    let node = i as u64 + 1;
                    let mut got = 0usize;
                    let mut sent = 0u64;
                    while sent < per_node {
                        let window = 16.min(per_node - sent);
                        for j in 0..window {
                            let n = sent + j;
                            let pid = u32::try_from(node * 10 + n % 4).unwrap_or(0);
                            let op = if (n / 4) % 2 == 0 {
                                PlockOp::LOCK
                            } else {
                                PlockOp::UNLOCK
                            };
                            let at = node * 1000 + n % 4 * 10;
                            let _ = k.send_plock(&req(op, true, false, pid, 200, at, at + 5));
                        }
                        for _ in 0..window {
                            if reply(k, T).is_some() {
                                got += 1;
                            }
                        }
                        sent += window;
                    }
                    got
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    });
    (answered, t.elapsed().as_secs_f64())
}

fn reply(k: &FakeKernel, limit: Duration) -> Option<PlockInfo> {
    k.recv_plock(limit)
}

fn main() -> ExitCode {
    let mut d = Demo {
        failures: Vec::new(),
    };
    println!("== 1. three corosync nodes in network namespaces (127.100.0.1-3, udpu)");
    progress("corosync forms its ring");
    let mut c = support::Cluster::start("demo", 3);
    let base = std::env::temp_dir().join(format!("dlm-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let mut kernels = Vec::new();
    let mut daemons = Vec::new();
    let Ok(fence_log) = fence_setup(&base) else {
        eprintln!("cannot write the demo fence agent under {}", base.display());
        return ExitCode::FAILURE;
    };
    println!(
        "== 2. a fake kernel and our dlm_controld on each node (fencing on: fence_all demo agent)"
    );
    for k in 1..=3 {
        let root = base.join(format!("n{k}"));
        let Ok(fk) = FakeKernel::start(&root) else {
            eprintln!("cannot start the fake kernel under {}", root.display());
            return ExitCode::FAILURE;
        };
        let Some(daemon) = start_daemon_on_corosync(
            &c.node_ns(k),
            &bin_dir().join("dlm_controld"),
            &root,
            &fk,
            &["-f", "1"],
        ) else {
            eprintln!("dlm_controld on node {k} did not come up");
            return ExitCode::FAILURE;
        };
        d.check(
            true,
            &format!("node {k}: dlm_controld up (pid {})", daemon.0.id()),
        );
        kernels.push(fk);
        daemons.push(daemon);
    }
    // started with the default post_join_delay (30 s: a slow start is not fenced at
    // startup); 1 s once all three are members, so node 3's failure below is fenced soon
    let nss: Vec<String> = (1..=3).map(|k| c.node_ns(k)).collect();
    d.check(
        settle_post_join_delay(&nss, 1, T),
        "every node sees all three daemons; post_join_delay=1 set with dlm_tool set_config",
    );

    println!("== 3. the kernel on every node joins lockspace '{LS}'");
    for (i, k) in kernels.iter().enumerate() {
        let ok = k.announce(LS).unwrap_or(false) && k.wait_joined(LS, T);
        d.check(
            ok,
            &format!("node {}: join completed (event_done written)", i + 1),
        );
    }
    for (i, k) in kernels.iter().enumerate() {
        let ok = k.wait_records(T, |r| configfs_members(r, LS) == vec![1, 2, 3]);
        d.check(ok, &format!("node {}: configfs members 1 2 3", i + 1));
    }
    show("dlm_tool ls on node 1", &tool(&c.node_ns(1), &["ls"]));

    println!("== 4. POSIX locks from all three nodes on inode 100");
    let (k1, k2, k3) = (&kernels[0], &kernels[1], &kernels[2]);
    let _ = k1.send_plock(&req(PlockOp::LOCK, true, false, 1001, 100, 0, 99));
    let r = reply(k1, T);
    d.check(
        r.is_some_and(|r| r.rv == 0),
        "node 1 pid 1001: write lock 0-99 granted",
    );
    let _ = k3.send_plock(&req(PlockOp::LOCK, false, false, 3003, 100, 200, 299));
    let r = reply(k3, T);
    d.check(
        r.is_some_and(|r| r.rv == 0),
        "node 3 pid 3003: read lock 200-299 granted",
    );
    let _ = k2.send_plock(&req(PlockOp::LOCK, true, false, 2002, 100, 50, 59));
    let r = reply(k2, T);
    d.check(
        r.is_some_and(|r| r.rv == -11),
        "node 2 pid 2002: non-blocking write lock 50-59 refused (EAGAIN): node 1 holds it",
    );
    let _ = k2.send_plock(&req(PlockOp::LOCK, true, true, 2002, 100, 50, 59));
    d.check(
        reply(k2, Duration::from_millis(500)).is_none(),
        "node 2 pid 2002: blocking write lock 50-59 waits",
    );
    let tables: Vec<String> = (1..=3)
        .map(|k| tool(&c.node_ns(k), &["plocks", LS]))
        .collect();
    show("dlm_tool plocks demo on node 1", &tables[0]);
    d.check(
        tables.iter().all(|t| t == &tables[0]) && tables[0].lines().count() == 3,
        "every node holds the same table: 2 locks and 1 waiter",
    );

    println!("== 5. node 1 unlocks: the waiter on node 2 is granted");
    let _ = k1.send_plock(&req(PlockOp::UNLOCK, true, false, 1001, 100, 0, 99));
    let r = reply(k1, T);
    d.check(r.is_some_and(|r| r.rv == 0), "node 1: unlock answered");
    let r = reply(k2, T);
    d.check(
        r.is_some_and(|r| r.rv == 0 && r.wait && r.pid == 2002),
        "node 2 pid 2002: waiting lock granted",
    );
    show(
        "dlm_tool plocks demo on node 3",
        &tool(&c.node_ns(3), &["plocks", LS]),
    );

    println!("== 6. a burst: 4 processes per node lock and unlock their own ranges");
    let (n, secs) = burst(&kernels, 1000);
    d.check(n == 3 * 1000, &format!("{n} of 3000 requests answered"));
    #[allow(clippy::cast_precision_loss)] // a few thousand requests
    let rate = n as f64 / secs;
    println!(
        "  {n} plock requests through corosync in {secs:.2} s: {rate:.0} requests/s across 3 nodes"
    );

    println!("== 7. node 3 dies (dlm_controld and corosync killed); node 1 fences it");
    drop(daemons.pop());
    c.signal(3, libc::SIGKILL);
    progress("corosync notices node 3 is gone (a few seconds), then fencing starts");
    let waiting = poll(T, || {
        let ls = tool(&c.node_ns(1), &["ls"]);
        ls.contains("wait fencing").then_some(ls)
    });
    if let Some(ls) = &waiting {
        show("dlm_tool ls on node 1 while the agent runs", ls);
    }
    d.check(
        waiting.is_some(),
        "node 1: the lockspace waits for node 3 to be fenced",
    );
    progress("the demo fence agent takes three seconds");
    let asked = poll(T, || {
        std::fs::read_to_string(&fence_log)
            .ok()
            .filter(|t| !t.is_empty())
    });
    if let Some(t) = &asked {
        show("what the fence agent read on its stdin", t);
    }
    d.check(
        asked
            .as_deref()
            .is_some_and(|t| t.matches("\nnode=3\nfail_time=").count() == 1),
        "the fence agent ran once for node 3",
    );
    for (i, k) in kernels[..2].iter().enumerate() {
        let ok = k.wait_records(T, |r| configfs_members(r, LS) == vec![1, 2]);
        d.check(
            ok,
            &format!("node {}: lockspace restarted with members 1 2", i + 1),
        );
    }
    let _ = k1.send_plock(&req(PlockOp::GET, true, false, 1001, 100, 0, u64::MAX));
    let r = reply(k1, T);
    d.check(
        r.is_some_and(|r| r.rv == 1 && r.pid == 2002),
        "node 1: GET finds node 2's lock; node 3's read lock is purged",
    );
    let t1 = tool(&c.node_ns(1), &["plocks", LS]);
    show("dlm_tool plocks demo on node 1", &t1);
    d.check(!t1.contains("nodeid 3"), "no lock of node 3 is left");
    show("dlm_tool ls on node 2", &tool(&c.node_ns(2), &["ls"]));
    let st = tool(&c.node_ns(2), &["status"]);
    show("dlm_tool status on node 2", &st);
    d.check(
        st.lines()
            .any(|l| l.starts_with("node 3 X ") && l.contains(" at 1 ")),
        "node 2 records node 3 as fenced by node 1",
    );

    println!("== 8. the survivors leave the lockspace and stop");
    for (i, k) in kernels[..2].iter().enumerate() {
        let ok = k.release(LS).is_ok()
            && k.wait_records(T, |r| {
                r.iter().any(|x| {
                    matches!(x, Record::Rmdir(p) if p == &format!("sys/kernel/config/dlm/cluster/spaces/{LS}"))
                })
            });
        d.check(ok, &format!("node {}: left '{LS}'", i + 1));
    }
    drop(daemons);
    drop(kernels);
    drop(c);
    let _ = std::fs::remove_dir_all(&base);
    if d.failures.is_empty() {
        println!("\ndemo finished: every step happened as shown");
        ExitCode::SUCCESS
    } else {
        println!("\ndemo FAILED: {}", d.failures.join("; "));
        ExitCode::FAILURE
    }
}
