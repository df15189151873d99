//! Real corosync, one node on loopback in a network namespace: join, the initial totem
//! ring, own messages in order, a second member joining and leaving with the right
//! reasons, quorum, cfg, cmap (including a string longer than 16 bytes), and corosync's
//! death reported as an error rather than a hang.

mod support;

use std::time::Duration;

use dlm_cpg::{Cfg, Cmap, CorosyncGroup, CpgError, Event, Group, Quorum, Reason};
use support::{Corosync, wait_for};

const NAME: &[u8] = b"dlm:ls:cpgtest\0";

fn drain(g: &mut CorosyncGroup, want: usize) -> Vec<Event> {
    let mut out = Vec::new();
    wait_for(Duration::from_secs(10), || {
        g.dispatch().expect("dispatch");
        while let Some(e) = g.poll_event() {
            out.push(e);
        }
        (out.len() >= want).then_some(())
    });
    out
}

#[test]
fn one_node_group_services_and_failure() {
    let mut cs = Corosync::start("live");
    let log_path = cs.dir.join("corosync.log").display().to_string();
    let result = cs.run(move || {
        // corosync needs a moment to come up: retry the first connection
        let mut g = wait_for(Duration::from_secs(15), || CorosyncGroup::join(NAME, true).ok())
            .expect("corosync came up and the join succeeded");
        assert_eq!(g.local_nodeid(), 1);
        // our join and the initial totem ring (CPG_MODEL_V1_DELIVER_INITIAL_TOTEM_CONF);
        // corosync 3.1.7 delivers the confchg first
        let evs = drain(&mut g, 2);
        assert!(
            evs.iter().any(|e| matches!(e, Event::Totem { members, ring } if members == &[1] && ring.nodeid == 1)),
            "{evs:?}"
        );
        let Some(Event::ConfChg { members, joined, left }) =
            evs.iter().find(|e| matches!(e, Event::ConfChg { .. }))
        else {
            panic!("expected confchg, got {evs:?}");
        };
        assert_eq!(members.len(), 1);
        assert!(left.is_empty());
        assert_eq!((joined[0].nodeid, joined[0].reason), (1, Reason::Join));
        let my_pid = joined[0].pid;
        assert_eq!(my_pid, std::process::id());

        // our own messages come back, in order, byte for byte (length 0 and 64 KiB too)
        let msgs: Vec<Vec<u8>> = (0..200u32)
            .map(|i| match i {
                0 => Vec::new(),
                1 => vec![0xAB; 65536],
                _ => i.to_le_bytes().to_vec(),
            })
            .collect();
        for m in &msgs {
            g.mcast(m).expect("mcast");
        }
        assert!(g.flush().expect("flush"));
        let evs = drain(&mut g, msgs.len());
        let got: Vec<Vec<u8>> = evs
            .iter()
            .filter_map(|e| match e {
                Event::Deliver { nodeid: 1, pid, payload } if *pid == my_pid => Some(payload.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(got, msgs);

        // another process joins, multicasts and leaves; then one joins and just exits
        // (corosync tells members apart by (nodeid, pid): a second handle of this process
        // cannot join the same group)
        let helper = |mode: &str| {
            let status = std::process::Command::new(std::env::current_exe().expect("exe"))
                .args(["--ignored", "--exact", "helper_member", "--nocapture"])
                .env("DLM_CPG_HELPER", mode)
                .status()
                .expect("run helper");
            assert!(status.success(), "helper {mode} failed");
        };
        helper("leave");
        let evs = drain(&mut g, 3);
        let Event::ConfChg { members, joined, .. } = &evs[0] else { panic!("{evs:?}") };
        assert_eq!((members.len(), joined[0].reason), (2, Reason::Join));
        let helper_pid = joined[0].pid;
        assert_ne!(helper_pid, my_pid);
        assert!(matches!(&evs[1], Event::Deliver { payload, pid, .. } if payload == b"from helper" && *pid == helper_pid));
        let Event::ConfChg { left, members, .. } = &evs[2] else { panic!("{evs:?}") };
        assert_eq!((left[0].pid, left[0].reason, members.len()), (helper_pid, Reason::Leave, 1));
        helper("exit");
        let evs = drain(&mut g, 2);
        let Event::ConfChg { left, .. } = &evs[1] else { panic!("{evs:?}") };
        assert_eq!(left[0].reason, Reason::ProcDown);

        // names are bytes with an explicit length: with and without the NUL are two groups
        let mut other = CorosyncGroup::join(&NAME[..NAME.len() - 1], false).expect("join");
        other.mcast(b"elsewhere").expect("mcast");
        let evs = drain(&mut other, 2);
        assert!(evs.iter().any(|e| matches!(e, Event::Deliver { payload, .. } if payload == b"elsewhere")));
        g.dispatch().expect("dispatch");
        assert!(g.poll_event().is_none(), "a message crossed between two different groups");
        assert!(matches!(
            CorosyncGroup::join(&[b'x'; 129], false),
            Err(CpgError::NameTooLong(129))
        ));

        // quorum, cfg and cmap
        let mut q = Quorum::new().expect("quorum");
        let change = wait_for(Duration::from_secs(10), || {
            q.dispatch().expect("quorum dispatch");
            q.poll_change()
        })
        .expect("initial quorum notification");
        assert!(change.quorate);
        assert_eq!(change.nodes, vec![1]);
        assert!(q.quorate().expect("getquorate"));
        let cfg = Cfg::new().expect("cfg");
        assert_eq!(cfg.local_nodeid().expect("local"), 1);
        let addrs = cfg.node_addrs(1).expect("addrs");
        assert_eq!(addrs[0].addr, Some("127.0.0.1:0".parse().expect("addr")));
        assert_eq!(&addrs[0].storage[..8], &[2, 0, 0, 0, 127, 0, 0, 1]);
        assert!(addrs[0].storage[8..].iter().all(|&b| b == 0));
        let cmap = Cmap::new().expect("cmap");
        assert_eq!(cmap.get_string("totem.cluster_name").expect("get"), Some("dlmtest".into()));
        assert_eq!(cmap.get_string("logging.logfile").expect("get"), Some(log_path.clone()));
        assert!(log_path.len() > 16);
        assert_eq!(cmap.get_u32("nodelist.node.0.nodeid").expect("get"), Some(1));
        assert_eq!(cmap.get_u32("no.such.key").expect("get"), None);
        assert_eq!(cmap.nodelist().expect("nodelist"), vec![1]);
        // the quorum switches are u8 (quorum.two_node is one: reading it as u32 killed the
        // daemon on a two-node cluster until a real-kernel run showed it)
        assert_eq!(cmap.get_u8("quorum.wait_for_all").expect("get"), Some(0));
        assert_eq!(cmap.get_u8("no.such.key").expect("get"), None);
        assert!(cmap.get_u32("quorum.wait_for_all").is_err());
        // dispatch refuses a thread whose stack libcpg's 1 MiB frame would overflow
        let small = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || {
                let mut q = q;
                q.dispatch()
            })
            .expect("spawn")
            .join()
            .expect("join");
        assert!(
            matches!(small, Err(CpgError::SmallStack { call: "quorum_dispatch", stack }) if stack < 2 << 20),
            "dispatch ran on a 256 KiB stack: {small:?}"
        );
        (g, other)
    });
    let (mut g, other) = result;
    drop(other);
    // corosync dies: the next dispatch says so instead of hanging
    cs.kill();
    let err = cs.run(move || {
        let r = wait_for(Duration::from_secs(10), || g.dispatch().err());
        drop(g);
        r
    });
    assert!(matches!(err, Some(CpgError::Gone { .. })), "{err:?}");
    drop(cs);
}

/// Run by the test above as a separate process, inside the namespace it inherits.
#[test]
#[ignore = "a helper process of one_node_group_services_and_failure"]
fn helper_member() {
    let mode = std::env::var("DLM_CPG_HELPER").expect("run only as a helper");
    let mut g = CorosyncGroup::join(NAME, false).expect("helper join");
    if mode == "exit" {
        let _ = drain(&mut g, 1);
        #[allow(clippy::exit)] // the point: no leave, no finalize, the process just goes
        std::process::exit(0);
    }
    g.mcast(b"from helper").expect("mcast");
    let evs = drain(&mut g, 2);
    assert!(
        evs.iter()
            .any(|e| matches!(e, Event::Deliver { payload, .. } if payload == b"from helper"))
    );
    g.leave().expect("leave");
    let evs = drain(&mut g, 1);
    assert!(matches!(&evs[0], Event::ConfChg { left, .. } if left[0].reason == Reason::Leave));
}

/// Through tokio: while one task awaits corosync, another runs (a current-thread runtime
/// would hang here if waiting blocked the thread), and its request is delivered in order.
#[test]
fn tokio_driven_group() {
    let cs = Corosync::start("tokio");
    let got = cs.run(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let g = wait_for(Duration::from_secs(15), || {
                CorosyncGroup::join(b"dlm:tokio\0", false).ok()
            })
            .expect("join");
            let mut g = dlm_cpg::AsyncCorosyncGroup::new(g).expect("register");
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
            tokio::spawn(async move {
                for i in 0..3u8 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    tx.send(vec![i; 10]).await.expect("send");
                }
            });
            let mut delivered = Vec::new();
            let work = async {
                while delivered.len() < 3 {
                    tokio::select! {
                        ev = g.next_event() => {
                            if let Event::Deliver { payload, .. } = ev.expect("event") {
                                delivered.push(payload);
                            }
                        }
                        Some(m) = rx.recv() => {
                            g.group().mcast(&m).expect("mcast");
                            g.flush().await.expect("flush");
                        }
                    }
                }
            };
            tokio::time::timeout(Duration::from_secs(10), work)
                .await
                .expect("not stuck");
            delivered
        })
    });
    assert_eq!(got, vec![vec![0u8; 10], vec![1; 10], vec![2; 10]]);
}

/// A burst handed over in portions: `enqueue` sends nothing, `flush_some` at most its
/// budget; `next_event` dispatches in portions and loses nothing (2,000 deliveries in order,
/// more than one wake-up's budget).
#[test]
fn portions_of_a_burst() {
    let cs = Corosync::start("portion");
    let got = cs.run(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let g = wait_for(Duration::from_secs(15), || {
                CorosyncGroup::join(b"dlm:portion\0", false).ok()
            })
            .expect("join");
            let mut g = dlm_cpg::AsyncCorosyncGroup::new(g).expect("register");
            for i in 0..2000u16 {
                g.group()
                    .enqueue(i.to_le_bytes().to_vec())
                    .expect("enqueue");
            }
            assert_eq!(g.group().send_queue_len(), 2000, "enqueue sends nothing");
            let drained = g.group().flush_some(10).expect("flush_some");
            assert!(!drained);
            let left = g.group().send_queue_len();
            assert!(
                (1990..2000).contains(&left) || g.group().pushed_back(),
                "{left}"
            );
            let mut delivered = Vec::new();
            let work = async {
                while delivered.len() < 2000 {
                    let _ = g.group().flush_some(64).expect("flush_some");
                    let ev = tokio::time::timeout(Duration::from_millis(50), g.next_event()).await;
                    if let Ok(Ok(Event::Deliver { payload, .. })) = ev {
                        delivered.push(u16::from_le_bytes([payload[0], payload[1]]));
                    }
                }
            };
            tokio::time::timeout(Duration::from_secs(30), work)
                .await
                .expect("not stuck");
            delivered
        })
    });
    assert_eq!(got, (0..2000u16).collect::<Vec<_>>());
}

/// corosync asks before it shuts down: refused once (it keeps running), allowed the
/// second time (it exits).
#[test]
fn shutdown_request_refused_then_allowed() {
    let mut cs = Corosync::start("shut");
    let netns = cs.netns.clone();
    let mut cfg = cs.run(|| {
        wait_for(Duration::from_secs(15), || {
            Cfg::with_shutdown_tracking().ok()
        })
        .expect("cfg")
    });
    let ask = || {
        std::process::Command::new("ip")
            .args(["netns", "exec", &netns, "corosync-cfgtool", "-H"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("corosync-cfgtool")
    };
    let answer = |cfg: &mut Cfg, allow: bool| {
        let polite = wait_for(Duration::from_secs(10), || {
            cfg.dispatch().ok()?;
            cfg.poll_shutdown()
        })
        .expect("shutdown request");
        assert!(polite, "corosync-cfgtool -H asks politely");
        cfg.reply_shutdown(allow).expect("reply");
    };
    let mut tool = ask();
    answer(&mut cfg, false);
    // corosync-cfgtool exits 0 either way; what matters is whether corosync goes away
    tool.wait().expect("cfgtool exit");
    assert!(
        wait_for(Duration::from_secs(2), || cfg.dispatch().err()).is_none(),
        "corosync shut down although we refused"
    );
    assert_eq!(cfg.local_nodeid().expect("corosync still answers"), 1);
    let mut tool = ask();
    answer(&mut cfg, true);
    assert!(tool.wait().expect("cfgtool exit").success());
    let gone = wait_for(Duration::from_secs(10), || cfg.dispatch().err());
    assert!(
        gone.is_some(),
        "corosync still running after an allowed shutdown"
    );
    drop(cfg);
    cs.kill();
}
