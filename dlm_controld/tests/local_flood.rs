//! A hostile local user against the daemon's three listeners (issue: hardening). The
//! daemon runs under a descriptor limit of 1024 (systemd's default soft limit); an
//! unprivileged process (setpriv, uid 65534) opens 1500 connections to each of the main
//! socket, the query socket and the metrics endpoint and holds them. Meanwhile the kernel
//! path (a lockspace join: sysfs and configfs writes) and root's `dlm_tool ls` still work,
//! the daemon holds no more than its bounds of the user's connections, and it does not spin.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use dlm_tests::{Daemon, FakeKernel, Netns, metric_in_ns, writes};

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

/// Descriptors the process has open.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// User plus system CPU time of the process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // the fields after the command's closing parenthesis; utime and stime are 14 and 15
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|w| w.parse().unwrap_or(0))
        .collect();
    f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
}

#[test]
fn an_unprivileged_flood_starves_neither_the_kernel_path_nor_root() {
    let dir = std::env::temp_dir().join(format!("dlm-flood-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let ns = Netns::new("flood").expect("netns");
    let daemon = Daemon(
        ns.command("prlimit")
            .arg("--nofile=1024:1024")
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_dlm_controld"))
            .args(["--kernel-root", &dir.display().to_string()])
            .args(["--cluster", "embedded", "--foreground"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dlm_controld"),
    );
    assert!(k.wait_daemon(T), "the daemon never listened for uevents");
    let pid = daemon.0.id();
    let before = fds(pid);

    // the flooder, where uid 65534 may run it
    let bin = std::env::temp_dir().join(format!("dlm-flood-bin-{}", std::process::id()));
    std::fs::create_dir_all(&bin).expect("bin dir");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let flood_bin = bin.join("flood");
    std::fs::copy(built("flood"), &flood_bin).expect("copy flood");
    let mut flood = ns
        .command("prlimit")
        .args(["--nofile=8192:8192", "--", "setpriv"])
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&flood_bin)
        .arg(FLOOD.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the flood");
    let mut opened = String::new();
    BufReader::new(flood.stdout.take().expect("stdout"))
        .read_line(&mut opened)
        .expect("flood report");
    let counts: Vec<usize> = opened
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    // TCP may drop a SYN while the accept queue is full: nearly every connection was made
    assert!(
        counts.len() == 3 && counts.iter().all(|&c| c >= FLOOD * 9 / 10),
        "{opened}"
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
    if let Some(mut stdin) = flood.stdin.take() {
        let _ = stdin.write_all(b"\n");
    }
    let _ = flood.wait();
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
    let _ = std::fs::remove_dir_all(&bin);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}
