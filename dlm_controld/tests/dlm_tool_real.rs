//! The real `dlm_tool` 4.2.0 (Debian's dlm-controld package) against our daemon on the
//! fake kernel: `ls`, `ls -n`, `dump_config` and `plocks` print what they print against the
//! C daemon for the same state (daemon-spec §5.7). The daemon runs in a network namespace
//! of its own so its abstract sockets meet nobody else's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::wire::global_id;
use dlm_tests::{Daemon, DaemonBuilder, FakeKernel, Record};

const T: Duration = Duration::from_secs(20);

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn run(ns: &str, bin: &str, args: &[&str]) -> (String, bool) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, bin])
        .args(args)
        .output()
        .expect("run a dlm_tool");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.success(),
    )
}

/// The real dlm_tool's stdout (Debian package dlm-controld).
fn tool(ns: &str, args: &[&str]) -> String {
    run(ns, "dlm_tool", args).0
}

/// Our dlm_tool, built next to this test by `cargo test --workspace`.
fn ours() -> String {
    let exe = std::env::current_exe().expect("test path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("dlm_tool");
    assert!(
        bin.exists(),
        "{} missing: run the tests with cargo test --workspace",
        bin.display()
    );
    bin.display().to_string()
}

/// Our dlm_tool prints exactly what the real one prints.
fn same(ns: &str, args: &[&str]) -> String {
    let real = tool(ns, args);
    let (mine, ok) = run(ns, &ours(), args);
    assert_eq!(mine, real, "dlm_tool {args:?}");
    assert!(ok, "our dlm_tool {args:?} failed");
    real
}

fn start(ns: &str, dir: &Path) -> Daemon {
    DaemonBuilder::new(env!("CARGO_BIN_EXE_dlm_controld"), dir)
        .embedded()
        .args(&["-j", "7"])
        .spawn(ns)
        .expect("start dlm_controld")
}

/// Polls `dump_config` until `pred` holds (the main socket has no replies).
fn config_until(ns: &str, pred: impl Fn(&str) -> bool) -> String {
    let end = std::time::Instant::now() + T;
    loop {
        let c = tool(ns, &["dump_config"]);
        if pred(&c) || std::time::Instant::now() > end {
            return c;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// set_config and reload_config from the real tool and ours; non-root callers refused.
fn control_socket(ns: &str, dir: &Path, k: &FakeKernel) {
    // a non-root caller: the tool thinks it worked, the daemon refuses and logs it
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .args(["dlm_tool", "set_config", "drop_resources_age=1234"])
        .output()
        .expect("setpriv");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "set_config done\n");
    let dump = {
        let end = std::time::Instant::now() + T;
        loop {
            let d = tool(ns, &["dump"]);
            if d.contains("refused for uid 65534") || std::time::Instant::now() > end {
                break d;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert!(
        dump.contains("command 19 refused for uid 65534: needs root"),
        "{dump}"
    );
    assert!(tool(ns, &["dump_config"]).contains("drop_resources_age=10000\n"));

    // the real tool as root
    assert_eq!(
        tool(
            ns,
            &[
                "set_config",
                "log_debug=1",
                "drop_resources_age=2000",
                "enable_fencing=0"
            ]
        ),
        "set_config done\n"
    );
    let c = config_until(ns, |c| c.contains("drop_resources_age=2000"));
    assert!(c.contains("log_debug=1 (set_config)\n"), "{c}");
    assert!(c.contains("drop_resources_age=2000 (set_config)\n"), "{c}");
    assert!(c.contains("\nenable_fencing=1\n"), "not settable: {c}");
    assert!(
        k.wait_records(T, |r| r.iter().any(
            |x| matches!(x, Record::Write(p, v) if p.ends_with("cluster/log_debug") && v == b"1")
        )),
        "log_debug written to configfs at once"
    );
    let d = tool(ns, &["dump"]);
    assert!(
        d.contains(" config dynamic drop_resources_age = 2000 previous use 10000\n"),
        "{d}"
    );

    // ours: restore, then reload a changed dlm.conf
    let (out, ok) = run(ns, &ours(), &["set_config", "drop_resources_age=restore"]);
    assert_eq!((out.as_str(), ok), ("set_config done\n", true));
    let c = config_until(ns, |c| c.contains("drop_resources_age=10000\n"));
    assert!(c.contains("drop_resources_age=10000\n"), "{c}");
    std::fs::create_dir_all(dir.join("etc/dlm")).expect("etc");
    std::fs::write(dir.join("etc/dlm/dlm.conf"), "drop_resources_count=7\n").expect("conf");
    assert_eq!(tool(ns, &["reload_config"]), "reload_config done\n");
    let c = config_until(ns, |c| c.contains("drop_resources_count=7"));
    assert!(c.contains("drop_resources_count=7 (dlm.conf)\n"), "{c}");
    // set_config wins over the file; cli options are untouched
    assert!(c.contains("log_debug=1 (set_config)\n"), "{c}");
    assert!(c.contains("post_join_delay=7 (cli option)\n"), "{c}");
    std::fs::remove_file(dir.join("etc/dlm/dlm.conf")).expect("rm conf");
    let (out, ok) = run(ns, &ours(), &["reload_config"]);
    assert_eq!((out.as_str(), ok), ("reload_config done\n", true));
    let c = config_until(ns, |c| c.contains("drop_resources_count=10\n"));
    assert!(c.contains("drop_resources_count=10\n"), "{c}");
}

/// Runs `f` on a thread inside network namespace `ns` (where the daemon's abstract
/// sockets are).
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        dlm_tests::enter_netns(&ns).expect("enter the daemon's namespace");
        f()
    })
    .join()
    .expect("thread")
}

fn connect(name: &[u8]) -> std::os::unix::net::UnixStream {
    use std::os::linux::net::SocketAddrExt;
    let a = std::os::unix::net::SocketAddr::from_abstract_name(name).expect("addr");
    std::os::unix::net::UnixStream::connect_addr(&a).expect("connect")
}

fn ask(bytes: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = connect(dlm_proto::query::QUERY_SOCK_NAME);
    s.write_all(bytes).expect("send");
    // a short request must not wait for bytes that never come
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// A query sent in parts, 100 ms apart, cut at `cuts`: the whole answer.
fn in_parts(bytes: &[u8], cuts: &[usize]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = connect(dlm_proto::query::QUERY_SOCK_NAME);
    let mut from = 0;
    for &cut in cuts {
        s.write_all(&bytes[from..cut]).expect("send");
        from = cut;
        std::thread::sleep(Duration::from_millis(100));
    }
    s.write_all(&bytes[from..]).expect("send");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read");
    out
}

/// NODE_INFO (no dlm_tool command uses it) and bad or stalled clients on both sockets.
fn raw_sockets(ns: &str) {
    use dlm_proto::query::{Command as Cmd, DlmcHeader, DlmcNode, NodeFlags};
    use std::io::Write;
    let ns2 = ns.to_owned();
    in_ns(ns, move || {
        let node_info = |ls: &[u8], id: i32| {
            let h = DlmcHeader {
                data: id,
                ..DlmcHeader::new(Cmd::NODE_INFO).with_name(ls)
            };
            let r = ask(&h.encode());
            let rh = DlmcHeader::decode(&r).expect("reply header");
            (rh, r.get(96..).map(|b| DlmcNode::decode(b).expect("node")))
        };
        let (h, n) = node_info(b"foo", 1);
        let n = n.expect("a node");
        assert_eq!((h.command, h.data, h.len), (Cmd::NODE_INFO, 0, 136));
        assert_eq!(n.nodeid, 1);
        assert!(n.flags.0 & NodeFlags::MEMBER != 0);
        let (h, n) = node_info(b"foo", 9);
        let n = n.expect("a node");
        assert_eq!(
            (h.data, n.nodeid, n.flags.0, n.added_seq),
            (0, 9, 0, 0),
            "unknown node"
        );
        assert_eq!(node_info(b"nosuch", 1).0.data, -2);

        // garbage: closed without a reply; the next client is answered
        assert!(ask(&[0xff; 96]).is_empty());
        assert!(ask(&[1, 2, 3]).is_empty());
        // a client that connects and says nothing stalls nobody
        let _silent = connect(dlm_proto::query::QUERY_SOCK_NAME);
        let _silent_main = connect(dlm_proto::query::MAIN_SOCK_NAME);
        // a SET_CONFIG whose 1024 bytes never come stalls nobody either
        let mut half = connect(dlm_proto::query::MAIN_SOCK_NAME);
        let h = DlmcHeader::new(Cmd::SET_CONFIG).with_payload_len(1024);
        half.write_all(&h.encode()).expect("send");
        let mut l = DlmcHeader::new(Cmd::LOCKSPACES);
        l.data = 128;
        let r = ask(&l.encode());
        assert_eq!(
            DlmcHeader::decode(&r).expect("reply").data,
            2,
            "two lockspaces"
        );
        // the header in two parts a moment apart (the clients thread waits for the rest)
        // or in three (the conns thread reads the rest) is answered with the same bytes as
        // the whole header at once (answered at accept)
        let whole = l.encode();
        assert_eq!(in_parts(&whole, &[10]), r, "LOCKSPACES in two parts");
        assert_eq!(in_parts(&whole, &[10, 20]), r, "LOCKSPACES in three parts");
        // so is a request its lockspace's task must answer (a plock dump): the clients
        // thread waits for the header, then hands the connection to the conns thread
        let name = LockspaceName::new(b"foo").expect("name");
        let dump = dlm_proto::query::Request::DumpPlocks(name).encode();
        let whole_dump = ask(&dump);
        assert!(whole_dump.len() > 96, "a header and the table");
        let late = in_parts(&dump, &[10]);
        assert_eq!(late, whole_dump, "DUMP_PLOCKS answered alike both ways");
        // DUMP_STATUS (no reply header: its records to the end) whole and in parts
        let status = dlm_proto::query::Request::DumpStatus.encode();
        for answer in [ask(&status), in_parts(&status, &[10])] {
            let (first, used) = dlm_proto::query::StateRecord::decode(&answer).expect("record");
            assert_eq!(first.kind, dlm_proto::query::StateType::Daemon);
            assert!(used < answer.len(), "the nodes' records follow");
        }
        let req = dlm_proto::query::Request::SetConfig {
            text: b"drop_resources_count=9 ".to_vec(),
        };
        connect(dlm_proto::query::MAIN_SOCK_NAME)
            .write_all(&req.encode())
            .expect("send");
    });
    let c = config_until(&ns2, |c| c.contains("drop_resources_count=9 "));
    assert!(c.contains("drop_resources_count=9 (set_config)\n"), "{c}");
    let d = tool(&ns2, &["dump"]);
    assert!(d.contains("query socket: bad magic"), "{d}");
    let (out, _) = run(
        &ns2,
        &ours(),
        &["set_config", "drop_resources_count=restore"],
    );
    assert_eq!(out, "set_config done\n");
    let _ = config_until(&ns2, |c| c.contains("drop_resources_count=10\n"));
}

fn http_get(ns: &str, path: &str) -> String {
    let req = format!("GET {path} HTTP/1.0\r\n\r\n");
    in_ns(ns, move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", 9465)).expect("metrics endpoint");
        s.write_all(req.as_bytes()).expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        out
    })
}

/// The value of one series, e.g. `dlm_plock_locks{lockspace="foo"}`.
fn series(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in:\n{text}"))
}

/// Each metric moved when its event happened (the table sizes are read at scrape time).
fn metrics_endpoint(ns: &str, foo_locks: u64) {
    let r = http_get(ns, "/metrics");
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
    let n = |x: u64| f64::from(u32::try_from(x).expect("small"));
    assert_eq!(
        series(&r, "dlm_plock_locks{lockspace=\"foo\"}"),
        n(foo_locks)
    );
    assert_eq!(series(&r, "dlm_plock_locks{lockspace=\"bar\"}"), 2.0);
    assert_eq!(series(&r, "dlm_plock_waiters{lockspace=\"bar\"}"), 1.0);
    assert_eq!(series(&r, "dlm_plock_resources{lockspace=\"bar\"}"), 1.0);
    assert_eq!(series(&r, "dlm_lockspace_members{lockspace=\"foo\"}"), 1.0);
    assert_eq!(
        series(&r, "dlm_lockspace_change_seq{lockspace=\"foo\"}"),
        1.0
    );
    assert_eq!(
        series(
            &r,
            "dlm_lockspace_waiting{condition=\"fencing\",lockspace=\"foo\"}"
        ),
        0.0
    );
    assert_eq!(
        series(
            &r,
            "dlm_plock_requests_total{lockspace=\"foo\",op=\"lock\"}"
        ),
        n(foo_locks)
    );
    assert_eq!(
        series(
            &r,
            "dlm_plock_requests_total{lockspace=\"bar\",op=\"unlock\"}"
        ),
        1.0
    );
    // the waiter is still blocked: two lock replies and one unlock reply in bar
    assert_eq!(
        series(
            &r,
            "dlm_plock_replies_total{lockspace=\"bar\",result=\"ok\"}"
        ),
        2.0
    );
    assert_eq!(
        series(
            &r,
            "dlm_plock_request_seconds_count{lockspace=\"foo\",wait=\"false\"}"
        ),
        n(foo_locks)
    );
    // one node, the lockspace's only member: every lock decided here, none through CPG
    // (whose group carried the START alone)
    assert_eq!(
        series(&r, "dlm_plock_local_total{lockspace=\"foo\"}"),
        n(foo_locks)
    );
    assert_eq!(
        series(&r, "dlm_plock_native_messages_total{lockspace=\"foo\"}"),
        0.0
    );
    let sent = series(&r, "dlm_cpg_messages_sent_total{lockspace=\"foo\"}");
    assert!((1.0..n(foo_locks)).contains(&sent), "sent {sent}");
    // each message of ours came back through corosync, its round trip measured once
    assert_eq!(
        series(&r, "dlm_cpg_round_trip_seconds_count{lockspace=\"foo\"}"),
        sent
    );
    assert_eq!(
        series(&r, "dlm_plock_handoff_seconds_count{lockspace=\"foo\"}"),
        n(foo_locks)
    );
    assert_eq!(
        series(&r, "dlm_plock_own_locks{lockspace=\"foo\"}"),
        n(foo_locks)
    );
    assert_eq!(
        series(&r, "dlm_plock_locks_max{lockspace=\"foo\"}"),
        1_000_000.0
    );
    assert!(series(&r, "dlm_cpg_messages_received_total{lockspace=\"foo\"}") >= 1.0);
    assert!(
        series(
            &r,
            "dlm_socket_requests_total{command=\"LOCKSPACES\",outcome=\"ok\",socket=\"query\"}"
        ) >= 1.0
    );
    assert!(
        series(
            &r,
            "dlm_socket_requests_total{command=\"SET_CONFIG\",outcome=\"refused\",socket=\"main\"}"
        ) >= 1.0
    );
    assert!(
        series(
            &r,
            "dlm_socket_requests_total{command=\"none\",outcome=\"bad\",socket=\"query\"}"
        ) >= 1.0
    );
    assert!(
        series(&r, "dlm_errors_total") >= 2.0,
        "bad magic and the refused uid"
    );
    assert_eq!(series(&r, "dlm_plock_bad_records_total"), 0.0);
    assert!(http_get(ns, "/").starts_with("HTTP/1.1 404"));
}

#[test]
fn real_dlm_tool_reads_our_daemon() {
    let ns = Netns(format!("dlmq-{}", std::process::id()));
    assert!(
        Command::new("ip")
            .args(["netns", "add", &ns.0])
            .status()
            .expect("ip")
            .success()
    );
    // loopback up: the metrics endpoint listens on 127.0.0.1
    assert!(
        Command::new("ip")
            .args(["-n", &ns.0, "link", "set", "lo", "up"])
            .status()
            .expect("ip")
            .success()
    );
    let dir: PathBuf = std::env::temp_dir().join(format!("dlm-tool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // no daemon yet: the same words from both tools, but ours exits non-zero
    let down = run(&ns.0, "dlm_tool", &["status"]);
    assert_eq!(down, ("cannot connect to dlm_controld\n".to_owned(), true));
    assert_eq!(run(&ns.0, &ours(), &["status"]), (down.0, false));
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let _d = start(&ns.0, &dir);
    assert!(k.wait_daemon(T));
    // no lockspace yet: ls prints nothing
    assert_eq!(tool(&ns.0, &["ls"]), "");
    assert!(k.announce("foo").expect("announce"));
    assert!(
        k.wait_records(T, |r| r.iter().any(
            |x| matches!(x, Record::Write(p, _) if p.ends_with("foo/event_done"))
        ))
    );

    let ls = tool(&ns.0, &["ls"]);
    let want = "dlm lockspaces\n\
                name          foo\n\
                id            0x6ce2339d\n\
                flags         0x00000000 \n\
                change        member 1 joined 1 remove 0 failed 0 seq 1,1\n\
                members       1 \n\n";
    assert_eq!(ls, want);
    let ln = tool(&ns.0, &["ls", "-n"]);
    assert!(ln.starts_with(want.trim_end_matches('\n')), "{ln}");
    assert!(
        ln.contains(
            "all nodes\nnodeid 1 member 1 failed 0 start 1 seq_add 1 seq_rem 0 check none\n"
        ),
        "{ln}"
    );

    let cfg = tool(&ns.0, &["dump_config"]);
    assert!(
        cfg.starts_with(
            "daemon_debug=0\nforeground=1 (cli option)\nlog_debug=0\nprotocol=detect\nport=21064\n"
        ),
        "{cfg}"
    );
    assert!(cfg.contains("post_join_delay=7 (cli option)\n"), "{cfg}");
    assert!(cfg.ends_with("help=-1\nversion=-1\n\n"), "{cfg:?}");

    let fsid = global_id(&LockspaceName::new(b"foo").expect("name"));
    let lock = PlockInfo {
        version: PLOCK_VERSION,
        op: PlockOp::LOCK,
        ex: true,
        wait: false,
        flags: PlockFlags(0),
        pid: 4242,
        nodeid: 0,
        rv: 0,
        fsid,
        number: 77,
        start: 0,
        end: 9,
        owner: 0xabc,
    };
    k.send_plock(&lock).expect("send");
    k.recv_plock_raw(T).expect("reply");
    assert_eq!(
        tool(&ns.0, &["plocks", "foo"]),
        "77 WR 0-9 nodeid 1 pid 4242 owner abc rown 0\n"
    );
    assert_eq!(tool(&ns.0, &["plocks", "nosuch"]), "");

    // a second lockspace with a lock held, a waiter queued and a range split
    assert!(k.announce("bar").expect("announce"));
    assert!(
        k.wait_records(T, |r| r.iter().any(
            |x| matches!(x, Record::Write(p, _) if p.ends_with("bar/event_done"))
        ))
    );
    let bar = global_id(&LockspaceName::new(b"bar").expect("name"));
    for (pid, owner, wait, start, end) in [(1, 0x11, false, 0, 99), (2, 0x22, true, 50, 60)] {
        let l = PlockInfo {
            fsid: bar,
            number: 5,
            pid,
            owner,
            wait,
            start,
            end,
            ..lock
        };
        k.send_plock(&l).expect("send");
    }
    k.recv_plock_raw(T).expect("first granted"); // the waiter stays unanswered
    let unlock_mid = PlockInfo {
        fsid: bar,
        number: 5,
        pid: 1,
        owner: 0x11,
        op: PlockOp::UNLOCK,
        start: 70,
        end: 79,
        ..lock
    };
    k.send_plock(&unlock_mid).expect("send");
    k.recv_plock_raw(T).expect("unlock reply");

    // the debug buffer, the plock buffer and the status stream
    let dump = tool(&ns.0, &["dump"]);
    assert!(dump.contains(" our_nodeid 1\n"), "{dump}");
    let started = format!(" dlm_controld {} started\n", env!("CARGO_PKG_VERSION"));
    assert!(dump.contains(&started), "{dump}");
    assert!(dump.ends_with("\n\n") || dump.ends_with('\n'), "{dump:?}");
    let pl = tool(&ns.0, &["log_plock"]);
    assert!(
        pl.contains(" foo read plock 4d LK WR 0-9 1/4242/abc w 0\n"),
        "{pl}"
    );
    // decided here (a native lockspace of one member): never delivered, so no receive
    // line, as C's ownership mode logs a request its owner applies
    assert!(!pl.contains(" foo receive plock 4d "), "{pl}");
    assert!(
        !dump.contains("read plock"),
        "plock lines stay out of the debug buffer"
    );
    let st = tool(&ns.0, &["status"]);
    let lines: Vec<&str> = st.lines().collect();
    // embedded mode: no quorum service (cluster ring 0), the daemon group's ring 1
    assert_eq!(
        lines.first(),
        Some(&"cluster nodeid 1 quorate 1 ring seq 0 1"),
        "{st}"
    );
    assert!(
        lines
            .get(1)
            .is_some_and(|l| l.starts_with("daemon now ") && l.ends_with(" fence_pid 0 ")),
        "{st}"
    );
    assert!(st.contains("\nnode 1 M add "), "{st}");
    let stv = tool(&ns.0, &["status", "-v"]);
    assert!(
        stv.starts_with("our_nodeid 1\n    member_count=1\n    joined_count=1\n"),
        "{stv}"
    );
    // ocf:pacemaker:controld reads this key
    assert!(stv.contains("\n    stateful_merge_wait=0\n"), "{stv}");
    assert!(
        stv.contains("\nnodeid 1\n    member=1\n    killed=0\n    left_reason=unknown\n"),
        "{stv}"
    );

    // our dlm_tool against the same daemon state: byte for byte
    for args in [
        &["ls"][..],
        &["ls", "-n"],
        &["-n", "ls", "bar"],
        &["ls", "foo"],
        &["dump_config"],
        &["plocks", "foo"],
        &["plocks", "bar"],
        &["log_plock"],
        &["run_list"],
    ] {
        let out = same(&ns.0, args);
        assert!(!out.is_empty(), "{args:?}");
    }
    // status carries the daemon's clock, which may tick between the two runs
    let clock = |s: &str| -> String {
        s.lines()
            .map(|l| {
                if l.starts_with("daemon now ") || l.starts_with("    monotime=") {
                    l.chars()
                        .filter(|c| !c.is_ascii_digit())
                        .collect::<String>()
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    for args in [&["status"][..], &["status", "-v"]] {
        let real = tool(&ns.0, args);
        let (mine, ok) = run(&ns.0, &ours(), args);
        assert!(ok);
        assert_eq!(clock(&mine), clock(&real), "dlm_tool {args:?}");
        assert!(real.lines().count() >= 3, "{real}");
    }
    assert_eq!(
        same(&ns.0, &["plocks", "bar"]),
        // unlock_internal case 2: the front piece keeps its place, the back is appended
        "5 WR 0-69 nodeid 1 pid 1 owner 11 rown 0\n\
         5 WR 80-99 nodeid 1 pid 1 owner 11 rown 0\n\
         5 WR 50-60 nodeid 1 pid 2 owner 22 rown 0 WAITING\n"
    );
    // --json: the same facts, parsed; plock ages from our daemon
    let (j, ok) = run(&ns.0, &ours(), &["plocks", "--json", "bar"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&j).expect("plocks json");
    let locks = v["plocks"].as_array().expect("array");
    assert_eq!(locks.len(), 3, "{j}");
    assert_eq!(v["unparsed"].as_array().map(Vec::len), Some(0), "{j}");
    assert_eq!(locks[2]["waiting"], true);
    assert_eq!(locks[2]["owner"], 0x22);
    assert_eq!(
        (locks[0]["start"].as_u64(), locks[0]["end"].as_u64()),
        (Some(0), Some(69))
    );
    assert!(locks.iter().all(|l| l["age_ms"].is_u64()), "{j}");
    let (j, ok) = run(&ns.0, &ours(), &["ls", "-n", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&j).expect("ls json");
    let names: Vec<&str> = v["lockspaces"]
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert_eq!(names.len(), 2, "{j}");
    assert!(names.contains(&"foo") && names.contains(&"bar"), "{j}");
    assert_eq!(v["lockspaces"][0]["members"], serde_json::json!([1]));
    assert_eq!(v["lockspaces"][0]["pending"], serde_json::Value::Null);
    assert_eq!(v["lockspaces"][0]["nodes"][0]["member"], 1);
    // settled lockspaces: --exit-code is 0
    assert!(run(&ns.0, &ours(), &["ls", "--exit-code"]).1);
    let (j, _) = run(&ns.0, &ours(), &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&j).expect("status json");
    assert_eq!(v["daemon"]["stateful_merge_wait"], 0, "{j}");
    assert_eq!(v["nodes"][0]["nodeid"], 1, "{j}");
    let (j, _) = run(&ns.0, &ours(), &["dump_config", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&j).expect("config json");
    assert!(
        v["options"]
            .as_array()
            .expect("array")
            .iter()
            .any(|o| o["name"] == "post_join_delay"
                && o["value"] == 7
                && o["source"] == "cli option"),
        "{j}"
    );

    // where the C tool prints nothing and exits 0, ours says why and exits 1
    assert_eq!(
        run(&ns.0, &ours(), &["plocks", "nosuch"]),
        (String::new(), false)
    );
    assert_eq!(
        run(&ns.0, &ours(), &["ls", "nosuch"]),
        (String::new(), false)
    );
    assert_eq!(tool(&ns.0, &["ls", "nosuch"]), "");

    // past 1 MiB the C tool shows the first MiB; ours asks for and shows the whole table
    let many = 24_000u64;
    for chunk in (0..many).collect::<Vec<_>>().chunks(200) {
        for &n in chunk {
            let l = PlockInfo {
                number: 1000 + n,
                ..lock
            };
            k.send_plock(&l).expect("send");
        }
        for _ in chunk {
            k.recv_plock_raw(T).expect("reply");
        }
    }
    control_socket(&ns.0, &dir, &k);
    raw_sockets(&ns.0);

    let real = tool(&ns.0, &["plocks", "foo"]);
    let (mine, ok) = run(&ns.0, &ours(), &["plocks", "foo"]);
    assert!(ok);
    let lines = u64::try_from(mine.lines().count()).expect("count");
    assert_eq!(lines, many + 1, "every lock");
    assert!(real.len() < 1024 * 1024, "{}", real.len());
    assert!(mine.len() > 1024 * 1024, "{}", mine.len());
    assert!(
        mine.starts_with(&real),
        "the capped dump is a prefix of the whole one"
    );
    assert!(real.ends_with('\n'), "capped at a line end");
    metrics_endpoint(&ns.0, many + 1);
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}
