//! The daemon's kernel seam against the fake kernel: configfs and sysfs operations land
//! with the exact bytes the C daemon writes (daemon-spec §2.2, §2.4); the plock device
//! carries one record per packet both ways; uevents arrive and parse; the monitor device
//! counts as "daemon available" only while it is open.

use std::path::PathBuf;
use std::time::Duration;

use dlm_controld::kernel::{ClusterAttrs, Kernel, READ_AT_ONCE, Records, RootedKernel};
use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp, Uevent, UeventAction};
use dlm_tests::{FakeKernel, Record};

fn root(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dlm-seam-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

const T: Duration = Duration::from_secs(10);

#[test]
fn configfs_and_sysfs_bytes() {
    let dir = root("fs");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let seam = RootedKernel::new(&dir);
    // setup_configfs_options / add_configfs_node for 127.0.0.1, node 1, local
    seam.setup_cluster(&ClusterAttrs {
        mark: 0,
        cluster_name: "dlmtest".into(),
        ..ClusterAttrs::default()
    })
    .expect("cluster");
    let mut addr = [0u8; 128];
    addr[..8].copy_from_slice(&[2, 0, 0, 0, 127, 0, 0, 1]);
    seam.add_comms_node(1, &addr, true, 0).expect("comms/1");
    // a lockspace the kernel announced: id, nodir, control, event_done (with NULs)
    assert!(
        !k.announce("foo").expect("announce"),
        "nobody listens for uevents here"
    );
    let foo = LockspaceName::new(b"foo").expect("name");
    seam.set_lockspace_id(&foo, 1_826_763_677).expect("id");
    seam.stop_lockspace(&foo).expect("control 0");
    seam.start_lockspace(&foo).expect("control 1");
    seam.event_done(&foo, 0).expect("event_done");
    let c = "sys/kernel/config/dlm/cluster";
    let want = [
        Record::Write(format!("{c}/comms/1/nodeid"), b"1".to_vec()),
        Record::Write(format!("{c}/comms/1/addr"), addr.to_vec()),
        Record::Write(format!("{c}/comms/1/local"), b"1".to_vec()),
        Record::Write("sys/kernel/dlm/foo/id".into(), b"1826763677\0".to_vec()),
        Record::Write("sys/kernel/dlm/foo/event_done".into(), b"0\0".to_vec()),
    ];
    assert!(
        k.wait_records(T, |r| want.iter().all(|w| r.contains(w))),
        "missing records; got {:?}",
        k.records()
    );
    let records = k.records();
    assert!(records.contains(&Record::Mkdir(c.into())));
    assert!(records.contains(&Record::Mkdir(format!("{c}/comms/1"))));
    assert!(records.contains(&Record::Write(
        format!("{c}/cluster_name"),
        b"dlmtest".to_vec()
    )));
    // two writes to control stay two values, in order
    let control: Vec<u8> = records
        .iter()
        .filter_map(|r| match r {
            Record::Write(p, b) if p.ends_with("foo/control") => Some(b.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(control, b"0\x001\x00");
    // errors name the path and the value
    let bar = LockspaceName::new(b"bar").expect("name");
    let e = seam.start_lockspace(&bar);
    let e = e.expect_err("no such lockspace directory").to_string();
    assert!(
        e.contains("sys/kernel/dlm/bar/control") && e.contains("\"1\\0\""),
        "{e}"
    );
    // rmdir
    seam.del_comms_node(1).expect("rmdir");
    assert!(k.wait_records(T, |r| r.contains(&Record::Rmdir(format!("{c}/comms/1")))));
    assert!(!dir.join(c).join("comms/1").exists());
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plock_device_uevents_and_monitor() {
    let dir = root("dev");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let seam = RootedKernel::new(&dir);
    assert!(!k.monitor_open());
    let monitor = seam.open_misc("dlm-monitor").expect("monitor");
    assert!(monitor.is_socket());
    let deadline = std::time::Instant::now() + T;
    while !k.monitor_open() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(k.monitor_open());

    let uevents = seam.open_uevents().expect("uevents");
    assert!(k.wait_daemon(T));
    assert!(k.announce("gfs0").expect("announce"), "the daemon listens");
    let ev = Uevent::parse(&uevents.recv().expect("recv")).expect("parses");
    assert_eq!(ev.action, UeventAction::Online);
    assert_eq!(ev.lockspace.as_bytes(), b"gfs0");

    let dev = seam.open_misc("dlm_plock").expect("plock");
    let req = PlockInfo {
        version: PLOCK_VERSION,
        op: PlockOp::LOCK,
        ex: true,
        wait: false,
        flags: PlockFlags(0),
        pid: 42,
        nodeid: 0,
        rv: 0,
        fsid: 7,
        number: 99,
        start: 0,
        end: 9,
        owner: 5,
    };
    k.send_plock(&req).expect("send");
    let mut buf = [0u8; 128];
    let n = dev.read_record(&mut buf).expect("read");
    assert_eq!(n, 64, "one read() is one 64-byte request");
    assert_eq!(PlockInfo::decode(&buf[..n]), Ok(req));
    let reply = PlockInfo {
        rv: -11,
        nodeid: 1,
        ..req
    };
    dev.write_records(&[reply.encode()], |e| panic!("write: {e}"));
    assert_eq!(k.recv_plock_raw(T), Some(reply.encode().to_vec()));

    // a batch: what is queued comes in one read, a bad record as it came, and a read
    // with nothing queued would block; replies go out in order
    let reqs: Vec<PlockInfo> = (0..3)
        .map(|i| PlockInfo {
            number: 100 + i,
            ..req
        })
        .collect();
    k.send_plock(&reqs[0]).expect("send");
    k.send_plock_raw(&[7u8; 10]).expect("send");
    k.send_plock(&reqs[1]).expect("send");
    k.send_plock(&reqs[2]).expect("send");
    let mut batch = Records::default();
    assert_eq!(dev.try_read_records(&mut batch).expect("read"), 4);
    let lens: Vec<usize> = batch.iter().map(<[u8]>::len).collect();
    assert_eq!(lens, [64, 10, 64, 64]);
    let got: Vec<u64> = batch
        .iter()
        .filter_map(|b| PlockInfo::decode(b).ok())
        .map(|i| i.number)
        .collect();
    assert_eq!(got, [100, 101, 102]);
    let e = dev.try_read_records(&mut batch).expect_err("empty");
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    // a read of at most two leaves the third queued
    for r in &reqs {
        k.send_plock(r).expect("send");
    }
    batch.limit(2);
    assert_eq!(dev.try_read_records(&mut batch).expect("read"), 2);
    batch.limit(READ_AT_ONCE);
    assert_eq!(dev.try_read_records(&mut batch).expect("read"), 1);
    let replies: Vec<dlm_controld::kernel::Record> = reqs
        .iter()
        .map(|r| PlockInfo { rv: 0, ..*r }.encode())
        .collect();
    dev.write_records(&replies, |e| panic!("write: {e}"));
    for r in &replies {
        assert_eq!(k.recv_plock_raw(T).as_deref(), Some(&r[..]));
    }

    drop(monitor);
    let deadline = std::time::Instant::now() + T;
    while k.monitor_open() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !k.monitor_open(),
        "closing the monitor must make the daemon unavailable"
    );
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `dlm_proto::errno` holds the Linux values (the crates below the daemon may not use
/// libc, so the one list is checked here).
#[test]
fn errno_values_are_linux_ones() {
    use dlm_proto::errno as e;
    assert_eq!(
        [e::EPERM, e::ENOENT, e::EAGAIN, e::EEXIST, e::EINVAL],
        [
            libc::EPERM,
            libc::ENOENT,
            libc::EAGAIN,
            libc::EEXIST,
            libc::EINVAL
        ]
    );
    assert_eq!(
        [
            e::ENOSPC,
            e::ENODATA,
            e::EOPNOTSUPP,
            e::ECANCELED,
            e::EDEADLK,
            e::ENOLCK,
            e::EIO
        ],
        [
            libc::ENOSPC,
            libc::ENODATA,
            libc::EOPNOTSUPP,
            libc::ECANCELED,
            libc::EDEADLK,
            libc::ENOLCK,
            libc::EIO
        ]
    );
}
