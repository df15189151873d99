//! The daemon binary on the fake kernel with the embedded group: startup writes, a
//! lockspace join and leave with the C daemon's exact configfs/sysfs bytes (daemon-spec
//! §2.2, §2.4, §2.5, §2.8), refusal of a second instance, SIGTERM.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use dlm_tests::{Daemon, DaemonBuilder, FakeKernel, Netns, Record, writes};

const T: Duration = Duration::from_secs(20);
const C: &str = "sys/kernel/config/dlm/cluster";

/// `dlm_controld --kernel-root <root> --foreground --cluster embedded` in `ns`.
fn daemon_cmd(ns: &Netns, root: &Path) -> std::process::Command {
    DaemonBuilder::new(env!("CARGO_BIN_EXE_dlm_controld"), root)
        .embedded()
        .command(&ns.0)
}

fn start(ns: &Netns, root: &Path) -> Daemon {
    Daemon(
        daemon_cmd(ns, root)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start dlm_controld"),
    )
}

fn root(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dlm-daemon-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The sysfs writes of one lockspace as one byte string (values end with NUL).
fn sysfs(records: &[Record], ls: &str) -> Vec<(String, Vec<u8>)> {
    let prefix = format!("sys/kernel/dlm/{ls}/");
    records
        .iter()
        .filter_map(|r| match r {
            Record::Write(p, b) => p.strip_prefix(&prefix).map(|a| (a.to_owned(), b.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn join_and_leave_a_lockspace_with_cs_bytes() {
    let dir = root("join");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let ns = Netns::new("emb").expect("netns");
    let mut d = start(&ns, &dir);
    assert!(k.wait_daemon(T), "the daemon never listened for uevents");
    assert!(
        k.monitor_open(),
        "the monitor device must be open before the daemon is ready"
    );

    // startup: cluster attributes and our comms entry
    let r = k.records();
    assert!(r.contains(&Record::Mkdir(C.into())));
    assert_eq!(writes(&r, &format!("{C}/mark")), vec![b"0".to_vec()]);
    assert_eq!(
        writes(&r, &format!("{C}/recover_callbacks")),
        vec![b"1".to_vec()]
    );
    assert_eq!(
        writes(&r, &format!("{C}/cluster_name")),
        vec![b"dlm".to_vec()]
    );
    assert!(
        writes(&r, &format!("{C}/protocol")).is_empty(),
        "protocol=detect writes nothing"
    );
    assert_eq!(
        writes(&r, &format!("{C}/comms/1/nodeid")),
        vec![b"1".to_vec()]
    );
    let mut addr = vec![0u8; 128];
    addr[..8].copy_from_slice(&[2, 0, 0, 0, 127, 0, 0, 1]);
    assert_eq!(writes(&r, &format!("{C}/comms/1/addr")), vec![addr]);
    assert_eq!(
        writes(&r, &format!("{C}/comms/1/mark")),
        vec![b"0".to_vec()]
    );
    assert_eq!(
        writes(&r, &format!("{C}/comms/1/local")),
        vec![b"1".to_vec()]
    );

    // join foo: id, configfs members, control, event_done — in this order in sysfs
    assert!(k.announce("foo").expect("announce"));
    let done = |r: &[Record]| writes(r, "sys/kernel/dlm/foo/event_done").len() == 1;
    assert!(
        k.wait_records(T, done),
        "join never completed: {:?}",
        k.records()
    );
    let r = k.records();
    assert_eq!(
        sysfs(&r, "foo"),
        vec![
            ("id".to_owned(), b"1826763677\0".to_vec()),
            ("control".to_owned(), b"1\0".to_vec()),
            ("event_done".to_owned(), b"0\0".to_vec()),
        ]
    );
    assert!(r.contains(&Record::Mkdir(format!("{C}/spaces/foo/nodes/1"))));
    assert_eq!(
        writes(&r, &format!("{C}/spaces/foo/nodes/1/nodeid")),
        vec![b"1".to_vec()]
    );
    assert_eq!(
        writes(&r, &format!("{C}/spaces/foo/nodes/1/weight")),
        vec![b"1".to_vec()]
    );

    // a second daemon is refused while this one runs
    let second = daemon_cmd(&ns, &dir)
        .stderr(Stdio::piped())
        .output()
        .expect("run second");
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("another dlm_controld is running"));

    // SIGTERM is ignored while a lockspace exists
    d.terminate();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        d.0.try_wait().expect("wait").is_none(),
        "the daemon exited with a lockspace"
    );

    // leave: stop, members removed, event_done; then the pending SIGTERM ends the daemon
    k.release("foo").expect("release");
    let left = |r: &[Record]| writes(r, "sys/kernel/dlm/foo/event_done").len() == 2;
    assert!(
        k.wait_records(T, left),
        "leave never completed: {:?}",
        k.records()
    );
    let r = k.records();
    let s = sysfs(&r, "foo");
    assert_eq!(
        &s[3..],
        &[
            ("control".to_owned(), b"0\0".to_vec()),
            ("event_done".to_owned(), b"0\0".to_vec())
        ]
    );
    assert!(r.contains(&Record::Rmdir(format!("{C}/spaces/foo/nodes/1"))));
    assert!(r.contains(&Record::Rmdir(format!("{C}/spaces/foo"))));
    let status = d
        .wait_exit(Duration::from_secs(10))
        .expect("the daemon did not exit after its last lockspace");
    assert!(status.success());
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without `--foreground` the daemon forks into the background (the parent exits 0), and
/// under systemd it sends READY=1 to `NOTIFY_SOCKET` once it serves.
#[test]
fn forks_and_notifies_systemd() {
    let dir = root("fork");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let notify_path = dir.join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("notify socket");
    notify.set_read_timeout(Some(T)).expect("timeout");
    let ns = Netns::new("fork").expect("netns");
    let status = ns
        .command(env!("CARGO_BIN_EXE_dlm_controld"))
        .args([
            "--kernel-root",
            &dir.display().to_string(),
            "--cluster",
            "embedded",
        ])
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run");
    assert!(status.success(), "the parent of a forking daemon exits 0");
    let mut buf = [0u8; 64];
    let n = notify
        .recv(&mut buf)
        .expect("READY=1 from the background daemon");
    assert_eq!(&buf[..n], b"READY=1");
    assert!(k.wait_daemon(T));
    // stop the background daemon by its pid file
    let pid: i32 = std::fs::read_to_string(dir.join("run/dlm_controld/dlm_controld.pid"))
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    // SAFETY: signalling the daemon this test started (its pid from its own pid file).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: probing whether the process exists.
        unsafe { libc::kill(pid, 0) != 0 }
    });
    assert!(gone, "the background daemon did not stop on SIGTERM");
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under a systemd watchdog (`WATCHDOG_USEC`) the daemon sends `WATCHDOG=1` at half the
/// interval, from its main loop; with `WATCHDOG_PID` naming another process it sends none.
#[test]
fn feeds_the_systemd_watchdog() {
    for (tag, pid_is_ours) in [("wdog", true), ("wdno", false)] {
        let dir = root(tag);
        let k = FakeKernel::start(&dir).expect("fake kernel");
        let notify_path = dir.join("notify.sock");
        let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("notify socket");
        notify
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let ns = Netns::new(tag).expect("netns");
        let mut cmd = daemon_cmd(&ns, &dir);
        let log = std::fs::File::create(dir.join("stderr")).expect("stderr file");
        cmd.env("NOTIFY_SOCKET", &notify_path)
            .env("WATCHDOG_USEC", "200000")
            .stdout(Stdio::null())
            .stderr(log);
        if !pid_is_ours {
            cmd.env("WATCHDOG_PID", "1");
        }
        let mut child = cmd.spawn().expect("start");
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut buf = [0u8; 64];
        while got.iter().filter(|m| m.as_slice() == b"WATCHDOG=1").count() < 3 {
            match notify.recv(&mut buf) {
                Ok(n) => got.push(buf[..n].to_vec()),
                Err(_) => break,
            }
        }
        // whether the daemon had ended by itself, and what it said, if a ping is missing
        let exited = child.try_wait().ok().flatten();
        let _ = child.kill();
        let _ = child.wait();
        let said = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
        assert_eq!(
            got.first().map(Vec::as_slice),
            Some(&b"READY=1"[..]),
            "{got:?}"
        );
        let pings = got.iter().filter(|m| m.as_slice() == b"WATCHDOG=1").count();
        if pid_is_ours {
            assert_eq!(pings, 3, "{got:?}; exited {exited:?}; stderr:\n{said}");
        } else {
            assert_eq!(pings, 0, "another process's watchdog: {got:?}");
        }
        drop(k);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// This project's `dlm_tool join` / `leave` through the kernel's `dlm-control` device (here
/// the fake kernel's): join creates the lockspace and returns once the daemon has joined
/// it; a second join only adds a user; the last leave releases it and the daemon leaves.
/// Without a daemon the kernel refuses, and the tool says so as C's does.
#[test]
fn dlm_tool_join_and_leave_through_dlm_control() {
    let dir = root("jl");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let ns = Netns::new("jl").expect("netns");
    let tool = |args: &[&str]| {
        let bin = Path::new(env!("CARGO_BIN_EXE_dlm_controld")).with_file_name("dlm_tool");
        let out = ns
            .command(&bin.display().to_string())
            .args(["--kernel-root", &dir.display().to_string()])
            .args(args)
            .output()
            .expect("dlm_tool");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.status.code(),
        )
    };
    // no daemon: the kernel has no user-space daemon to ask
    let (out, err, code) = tool(&["join", "foo"]);
    assert_eq!(out, "Joining lockspace \"foo\" permission 600 \n");
    assert!(err.contains("dlm_new_lockspace foo error 49"), "{err}");
    assert_eq!(code, Some(255));

    let mut d = start(&ns, &dir);
    assert!(k.wait_daemon(T));
    assert!(k.wait_records(T, |_| k.monitor_open()));
    let (out, _, code) = tool(&["-m", "0640", "-f", "1", "join", "foo"]);
    assert_eq!(
        (out.as_str(), code),
        (
            "Joining lockspace \"foo\" permission 640 flags FS \ndone\n",
            Some(0)
        )
    );
    // joined by the time join returned
    assert_eq!(
        writes(&k.records(), "sys/kernel/dlm/foo/event_done"),
        vec![b"0\0".to_vec()]
    );
    let (ls, _, _) = tool(&["ls"]);
    assert!(ls.contains("name          foo\n"), "{ls}");
    // a second user; its leave keeps the lockspace
    assert_eq!(tool(&["join", "foo"]).2, Some(0));
    let (out, _, code) = tool(&["leave", "foo"]);
    assert_eq!(
        (out.as_str(), code),
        ("Leaving lockspace \"foo\"\ndone\n", Some(0))
    );
    assert_eq!(
        writes(&k.records(), "sys/kernel/dlm/foo/event_done").len(),
        1
    );
    // the last leave: the daemon leaves (event_done again, configfs removed)
    assert_eq!(tool(&["leave", "foo"]).2, Some(0));
    let r = k.records();
    assert_eq!(writes(&r, "sys/kernel/dlm/foo/event_done").len(), 2);
    assert!(r.contains(&Record::Rmdir(format!("{C}/spaces/foo"))));
    let (_, err, code) = tool(&["leave", "foo"]);
    assert_eq!(code, Some(255), "{err}");
    // joinleave does both
    let (out, _, code) = tool(&["joinleave", "bar"]);
    assert_eq!(
        (out.as_str(), code),
        (
            "Joining lockspace \"bar\" permission 600 \ndone\nLeaving lockspace \"bar\"\ndone\n",
            Some(0)
        )
    );
    let _ = d.0.kill();
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kernel that still has a lockspace when the daemon starts (its daemon died with it):
/// the daemon refuses to run, naming it, as C's `check_uncontrolled_lockspaces`.
#[test]
fn refuses_to_start_beside_uncontrolled_lockspaces() {
    let dir = root("unctl");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    std::fs::create_dir_all(dir.join("sys/kernel/dlm/stale")).expect("stale lockspace");
    let ns = Netns::new("unctl").expect("netns");
    let out = daemon_cmd(&ns, &dir).output().expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("found uncontrolled lockspaces [\"stale\"]"),
        "{err}"
    );
    assert!(
        !k.monitor_open(),
        "it stopped before opening the monitor device"
    );
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Logging through `tracing`: `dlm_tool dump` keeps C's text lines, named by the lockspace
/// span (the membership lines as C words them); `log_format=json` in dlm.conf makes the log
/// file one JSON object per line with the events' fields; a bad `log_format` is refused.
#[test]
fn logs_c_lines_in_the_ring_and_json_in_the_file() {
    let dir = root("log");
    std::fs::create_dir_all(dir.join("etc/dlm")).expect("mkdir");
    std::fs::write(dir.join("etc/dlm/dlm.conf"), "log_format=bogus\n").expect("conf");
    let ns = Netns::new("log").expect("netns");
    let out = daemon_cmd(&ns, &dir)
        .args(["--syslog", "maybe"])
        .output()
        .expect("run dlm_controld");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--syslog must be on or off, not maybe"),
        "{out:?}"
    );
    let out = daemon_cmd(&ns, &dir).output().expect("run dlm_controld");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("log format must be c or json, not bogus"),
        "{out:?}"
    );

    std::fs::write(
        dir.join("etc/dlm/dlm.conf"),
        "log_format=json\ndebug_logfile=1\nmetrics=127.0.0.1:9477\n",
    )
    .expect("conf");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let d = start(&ns, &dir);
    assert!(k.wait_daemon(T));
    assert!(k.announce("foo").expect("announce"));
    assert!(k.wait_joined("foo", T));

    let bin = Path::new(env!("CARGO_BIN_EXE_dlm_controld")).with_file_name("dlm_tool");
    let dump = ns
        .command(&bin.display().to_string())
        .arg("dump")
        .output()
        .expect("dlm_tool dump");
    let dump = String::from_utf8_lossy(&dump.stdout).into_owned();
    let has = |tail: &str| {
        dump.lines().any(|l| {
            l.split_once(' ')
                .is_some_and(|(t, rest)| t.parse::<u64>().is_ok() && rest == tail)
        })
    };
    assert!(has("foo add_change cg 1 joined nodeid 1"), "{dump}");
    assert!(
        has("foo add_change cg 1 counts member 1 joined 1 remove 0 failed 0"),
        "{dump}"
    );
    assert!(has("foo start_kernel cg 1 member_count 1"), "{dump}");
    // dlm.conf's metrics= moved the endpoint
    let scrape = ns
        .command("bash")
        .args([
            "-c",
            "exec 3<>/dev/tcp/127.0.0.1/9477; printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3",
        ])
        .output()
        .expect("scrape");
    assert!(
        String::from_utf8_lossy(&scrape.stdout)
            .contains("dlm_lockspace_members{lockspace=\"foo\"} 1"),
        "{scrape:?}"
    );
    assert!(!dump.contains('{'), "the ring keeps C's text: {dump}");

    let log = std::fs::read_to_string(dir.join("var/log/dlm_controld/dlm_controld.log"))
        .expect("log file");
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    let counts = lines
        .iter()
        .find(|j| {
            j["ls"] == "foo"
                && j["msg"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("add_change cg 1 counts"))
        })
        .unwrap_or_else(|| panic!("no add_change line in {log}"));
    assert_eq!(counts["level"], "debug");
    assert_eq!(counts["cg"], 1);
    assert_eq!(counts["member"], 1);
    assert_eq!(counts["joined"], 1);
    assert!(counts["time"].is_u64());
    let started = lines
        .iter()
        .find(|j| j["msg"].as_str().is_some_and(|m| m.ends_with(" started")))
        .unwrap_or_else(|| panic!("no start line in {log}"));
    assert_eq!(started["level"], "info");
    assert!(started["version"].is_string());
    drop(d);
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A datagram longer than any uevent is dropped whole, counted and logged; the daemon goes
/// on and the next uevent (a join) is served. ENOBUFS and EINTR are gone on from the same
/// way (`UeventLoss`); only a broken socket ends the daemon.
#[test]
fn an_oversized_uevent_is_dropped_and_the_daemon_goes_on() {
    let dir = root("uevent");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let ns = Netns::new("uev").expect("netns");
    let mut d = start(&ns, &dir);
    assert!(k.wait_daemon(T), "the daemon never listened for uevents");
    let mut big = b"online@/kernel/dlm/foo\0ACTION=online\0".to_vec();
    big.resize(12_000, b'x');
    k.send_uevent(&big).expect("send");
    assert!(k.announce("foo").expect("announce"));
    let done = |r: &[Record]| writes(r, "sys/kernel/dlm/foo/event_done").len() == 1;
    assert!(k.wait_records(T, done), "the join after it never completed");
    assert_eq!(d.0.try_wait().ok().flatten(), None, "the daemon is running");
    assert_eq!(
        dlm_tests::metric_in_ns(&ns.0, "dlm_uevent_errors_total{reason=\"truncated\"}"),
        1.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The pid file's mode is the daemon's, not the inherited umask's.
#[test]
fn the_pid_file_ignores_a_zero_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = root("umask");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let ns = Netns::new("umask").expect("netns");
    let mut c = ns.command("sh");
    c.args([
        "-c",
        "umask 000; exec \"$0\" \"$@\"",
        env!("CARGO_BIN_EXE_dlm_controld"),
    ])
    .args(["--kernel-root", &dir.display().to_string()])
    .args(["--cluster", "embedded", "--foreground"])
    .stdout(Stdio::null());
    let _d = Daemon(c.spawn().expect("start dlm_controld"));
    assert!(k.wait_daemon(T), "the daemon never listened for uevents");
    let pid = dir.join("run/dlm_controld/dlm_controld.pid");
    let mode = std::fs::metadata(&pid)
        .expect("pid file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A configfs error while leaving (a node directory that will not go) is logged; the leave
/// still ends: event_done is written and the name unregistered, so a new join of the same
/// lockspace is served. It used to skip both: the unmount hung.
#[test]
fn a_configfs_error_does_not_stop_a_leave() {
    let dir = root("leaverr");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let ns = Netns::new("leaverr").expect("netns");
    let _d = start(&ns, &dir);
    assert!(k.wait_daemon(T), "the daemon never listened for uevents");
    let dones = |r: &[Record]| writes(r, "sys/kernel/dlm/foo/event_done");
    assert!(k.announce("foo").expect("announce"));
    assert!(k.wait_records(T, |r| dones(r).len() == 1), "join");
    std::fs::create_dir_all(dir.join(format!("{C}/spaces/foo/nodes/1/stuck"))).expect("mkdir");
    k.release("foo").expect("offline uevent");
    assert!(
        k.wait_records(T, |r| dones(r).len() == 2),
        "the leave never ended"
    );
    assert_eq!(dones(&k.records())[1], b"0\0".to_vec());
    // a new join of foo starts (the fake kernel records one lockspace's life only: the
    // daemon's own log shows the second start)
    assert!(k.announce("foo").expect("announce again"));
    let tool = Path::new(env!("CARGO_BIN_EXE_dlm_controld")).with_file_name("dlm_tool");
    let started = || {
        let out = ns.command(&tool.display().to_string()).arg("dump").output();
        out.map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .matches("foo start_kernel")
                .count()
        })
        .unwrap_or(0)
    };
    let end = std::time::Instant::now() + T;
    while started() < 2 && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(started(), 2, "a new join was not served");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The daemon's threads: its one thread (the main task, the lockspaces), the plock
/// device's reader, the log writer, the local sockets on a thread of their own with its
/// own runtime, so that no query waits behind plock work, and the main loop's tick.
#[test]
fn the_local_sockets_have_a_thread_of_their_own() {
    let dir = root("threads");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let ns = Netns::new("threads").expect("netns");
    let d = start(&ns, &dir);
    assert!(k.wait_daemon(T), "the daemon never listened for uevents");
    let names = || -> Vec<String> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", d.0.id())).expect("tasks");
        let mut v: Vec<String> = tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
            .map(|c| c.trim().to_owned())
            .collect();
        v.sort();
        v
    };
    let deadline = std::time::Instant::now() + T;
    // every thread is started by then (the connections' and the log writer's too: a
    // loaded host starts them last)
    let all_up = || {
        let n = names();
        [
            "dlm_clients",
            "dlm_conns",
            "dlm_log",
            "dlm_tick",
            "dlm_plock",
        ]
        .iter()
        .all(|t| n.iter().any(|x| x == t))
    };
    while !all_up() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        names(),
        [
            "dlm_clients",
            "dlm_conns",
            "dlm_controld",
            "dlm_log",
            "dlm_plock",
            "dlm_tick"
        ],
        "the clients thread and its connections' thread, the daemon's one thread, the log \
         writer, the plock device's reader, the tick"
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
