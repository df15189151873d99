//! A hostile local user against the daemon's three listeners (issue: hardening). The
//! daemon runs under a descriptor limit of 1024 (systemd's default soft limit); an
//! unprivileged process (setpriv, uid 65534) opens 1500 connections to each of the main
//! socket, the query socket and the metrics endpoint and holds them. Meanwhile the kernel
//! path (a lockspace join: sysfs and configfs writes) and root's `dlm_tool ls` still work,
//! the daemon holds no more than its bounds of the user's connections, and it does not spin.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dlm_tests::{
    Daemon, FakeKernel, Flood, Netns, cpu_ticks, metric_in_ns, thread_cpu_ticks, writes,
};

const T: Duration = Duration::from_secs(20);
const FLOOD: usize = 1500;

/// A binary built next to this test (`cargo test --workspace`).
fn built(name: &str) -> PathBuf {
    std::env::current_exe()
        .expect("test path")
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join(name)
}

/// The daemon (embedded group, fake kernel at `dir`) in `ns`, behind the `wrapper` words
/// (a program that execs the rest, so the pid is the daemon's), if any.
fn start_daemon(ns: &Netns, wrapper: &[&str], dir: &Path) -> Daemon {
    let daemon = env!("CARGO_BIN_EXE_dlm_controld");
    let (program, rest) = wrapper
        .split_first()
        .map_or((daemon, &[][..]), |(p, r)| (*p, r));
    let mut c = ns.command(program);
    if !wrapper.is_empty() {
        c.args(rest).arg(daemon);
    }
    Daemon(
        c.args(["--kernel-root", &dir.display().to_string()])
            .args(["--cluster", "embedded", "--foreground"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dlm_controld"),
    )
}

/// Descriptors the process has open.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

#[test]
fn an_unprivileged_flood_starves_neither_the_kernel_path_nor_root() {
    let dir = std::env::temp_dir().join(format!("dlm-flood-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let ns = Netns::new("flood").expect("netns");
    let daemon = start_daemon(&ns, &["prlimit", "--nofile=1024:1024", "--"], &dir);
    assert!(k.wait_daemon(T), "the daemon never listened for uevents");
    let pid = daemon.0.id();
    let before = fds(pid);

    let flood = Flood::start(&ns, &built("flood"), FLOOD).expect("start the flood");
    // TCP may drop a SYN while the accept queue is full: nearly every connection was made
    assert!(
        flood.opened.len() == 3 && flood.opened.iter().all(|&c| c >= FLOOD * 9 / 10),
        "{:?}",
        flood.opened
    );

    // it does not spin: under half a second of CPU in two seconds of the flood held
    let t0 = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu_ticks(pid) - t0;
    assert!(spent < 50, "{spent} ticks of CPU in 2 s under a held flood");
    // it holds at most its bounds of the user's connections (64 non-root at once)
    let during = fds(pid);
    assert!(
        during < before + 100,
        "{before} descriptors before, {during} during"
    );

    // the kernel path: a lockspace join writes sysfs and configfs and completes
    assert!(k.announce("foo").expect("announce"));
    let done = |r: &[dlm_tests::Record]| !writes(r, "sys/kernel/dlm/foo/event_done").is_empty();
    assert!(k.wait_records(T, done), "the join never completed");
    assert_eq!(
        writes(&k.records(), "sys/kernel/dlm/foo/event_done"),
        vec![b"0\0".to_vec()],
        "the join succeeded"
    );
    // root's command is answered
    let ls = ns
        .command("timeout")
        .arg("10")
        .arg(built("dlm_tool"))
        .arg("ls")
        .output()
        .expect("dlm_tool ls");
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(ls.status.success() && text.contains("foo"), "{text}");

    // the flood ends; what it met is counted
    drop(flood);
    let refused = |socket: &str| {
        metric_in_ns(
            &ns.0,
            &format!("dlm_socket_refused_total{{bound=\"uid\",socket=\"{socket}\"}}"),
        )
    };
    // one uid holds at most 16 connections at once over all listeners (a TCP peer's uid is
    // unknown: they share one such share), so most of each burst was closed at accept
    for socket in ["main", "query", "metrics"] {
        assert!(
            refused(socket) >= (FLOOD / 2) as f64,
            "{socket}: {} refused",
            refused(socket)
        );
    }
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether the daemon in `ns` answers a query within [`T`]: its sockets are bound, and the
/// clients thread scheduled, a moment after the uevent socket `wait_daemon` waits for.
fn wait_answering(ns: &Netns) -> bool {
    let netns = ns.0.clone();
    let asking = std::thread::spawn(move || {
        if dlm_tests::enter_netns(&netns).is_err() {
            return false;
        }
        let end = std::time::Instant::now() + T;
        while std::time::Instant::now() < end {
            if dlm_tests::closed_loop::lockspaces_query().is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    });
    asking.join().unwrap_or(false)
}

/// Queries as fast as the socket answers them, on a thread entered into `netns`.
fn query_loop(netns: String, stop: Arc<AtomicBool>) -> u64 {
    if dlm_tests::enter_netns(&netns).is_err() {
        return 0;
    }
    let mut answered = 0;
    while !stop.load(Ordering::Relaxed) {
        answered += u64::from(dlm_tests::closed_loop::lockspaces_query().is_ok());
    }
    answered
}

/// A storm of queries from local users gets the clients thread's budget of CPU
/// (`clients_cpu_budget_us`, 1 ms of every 10 ms) and no more: the kernel holds the thread
/// (SCHED_DEADLINE) to a tenth of one CPU however many clients ask, while plock work goes on.
#[test]
fn a_query_storm_takes_no_more_than_the_clients_budget() {
    let dir = std::env::temp_dir().join(format!("dlm-qstorm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let ns = Netns::new("qstorm").expect("netns");
    let daemon = start_daemon(&ns, &[], &dir);
    assert!(k.wait_daemon(T), "the daemon never listened for uevents");
    assert!(wait_answering(&ns), "the daemon never answered a query");
    let pid = daemon.0.id();
    let (tid, _) = thread_cpu_ticks(pid, "dlm_clients").expect("the clients thread");
    let sched =
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/sched")).unwrap_or_default();
    let policy = sched
        .lines()
        .find(|l| l.starts_with("policy"))
        .and_then(|l| l.split(':').nth(1))
        .map(str::trim);
    assert_eq!(policy, Some("6"), "SCHED_DEADLINE (6) as root:\n{sched}");

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let (n, s) = (ns.0.clone(), stop.clone());
            std::thread::spawn(move || query_loop(n, s))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (_, t0) = thread_cpu_ticks(pid, "dlm_clients").expect("the clients thread");
    std::thread::sleep(Duration::from_secs(3));
    let (_, t1) = thread_cpu_ticks(pid, "dlm_clients").expect("the clients thread");
    stop.store(true, Ordering::Relaxed);
    let answered: u64 = clients.into_iter().map(|c| c.join().unwrap_or(0)).sum();
    // 3 s at a tenth of one CPU: 30 ticks (10 ms), some slack for the tick's rounding
    let spent = t1 - t0;
    assert!(answered > 1000, "{answered} queries answered");
    assert!(spent <= 36, "{spent} ticks of the clients thread in 3 s");
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}
