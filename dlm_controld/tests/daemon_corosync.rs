//! The daemon binary on real corosync (one node on loopback in a network namespace) and the
//! fake kernel: cluster name and comms entry from corosync, the daemon group, a lockspace
//! group `dlm:ls:foo\0` joined and left with the C daemon's configfs/sysfs bytes.

#[path = "../../cpg/tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::Duration;

use dlm_proto::kernel::{PlockFlags, PlockInfo, PlockOp};
use dlm_tests::{Daemon, DaemonBuilder, FakeKernel, Record, writes};
use support::Corosync;

const T: Duration = Duration::from_secs(30);
const C: &str = "sys/kernel/config/dlm/cluster";

/// Starts the daemon on corosync in its namespace, on the fake kernel under `dir`, with
/// `env` added. corosync needs a moment and the daemon fails fast if it cannot connect, so
/// this retries.
fn start(
    cs: &Corosync,
    dir: &std::path::Path,
    k: &FakeKernel,
    env: &[(&str, &std::ffi::OsStr)],
) -> Daemon {
    let daemon = env.iter().fold(
        DaemonBuilder::new(env!("CARGO_BIN_EXE_dlm_controld"), dir).args(&["-f", "0"]),
        |b, (k, v)| b.env(k, v),
    );
    for _ in 0..50 {
        // one that did not come up is killed when dropped
        let d = daemon.spawn(&cs.netns).expect("start dlm_controld");
        if k.wait_daemon(Duration::from_secs(2)) {
            return d;
        }
    }
    panic!("the daemon never came up on corosync");
}

#[test]
fn lockspace_on_real_corosync() {
    let cs = Corosync::start("daemon");
    let dir = std::env::temp_dir().join(format!("dlm-daemon-cs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let mut d = start(&cs, &dir, &k, &[]);
    let r = k.records();
    assert_eq!(
        writes(&r, &format!("{C}/cluster_name")),
        vec![b"dlmtest".to_vec()]
    );
    let mut addr = vec![0u8; 128];
    addr[..8].copy_from_slice(&[2, 0, 0, 0, 127, 0, 0, 1]);
    assert_eq!(writes(&r, &format!("{C}/comms/1/addr")), vec![addr]);
    assert_eq!(
        writes(&r, &format!("{C}/comms/1/local")),
        vec![b"1".to_vec()]
    );

    assert!(k.announce("foo").expect("announce"));
    let joined = |r: &[Record]| writes(r, "sys/kernel/dlm/foo/event_done").len() == 1;
    assert!(
        k.wait_records(T, joined),
        "join never completed: {:?}",
        k.records()
    );
    let r = k.records();
    assert_eq!(
        writes(&r, "sys/kernel/dlm/foo/id"),
        vec![b"1826763677\0".to_vec()]
    );
    assert_eq!(
        writes(&r, "sys/kernel/dlm/foo/control"),
        vec![b"1\0".to_vec()]
    );
    assert_eq!(
        writes(&r, &format!("{C}/spaces/foo/nodes/1/weight")),
        vec![b"1".to_vec()]
    );
    // the lockspace group is visible to corosync with its NUL-counted name
    let groups = Command::new("ip")
        .args(["netns", "exec", &cs.netns, "corosync-cpgtool"])
        .output()
        .expect("corosync-cpgtool");
    let groups = String::from_utf8_lossy(&groups.stdout);
    assert!(groups.contains("dlm:ls:foo"), "{groups}");
    assert!(groups.contains("dlm:controld"), "{groups}");

    k.release("foo").expect("release");
    let left = |r: &[Record]| writes(r, "sys/kernel/dlm/foo/event_done").len() == 2;
    assert!(
        k.wait_records(T, left),
        "leave never completed: {:?}",
        k.records()
    );
    assert!(
        k.records()
            .contains(&Record::Rmdir(format!("{C}/spaces/foo")))
    );

    d.terminate();
    let status = d
        .wait_exit(Duration::from_secs(10))
        .expect("the daemon did not exit on SIGTERM");
    assert!(status.success());
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// corosync killed under a joined lockspace, whose group the plock device's reader polls:
/// the daemon ends with an error, as C's does when the cluster goes down (its reader's `poll`
/// on the dead connection neither spins nor keeps it alive).
#[test]
fn corosync_lost_under_a_joined_lockspace_ends_the_daemon() {
    let mut cs = Corosync::start("cslost");
    let dir = std::env::temp_dir().join(format!("dlm-cs-lost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let mut d = start(&cs, &dir, &k, &[]);
    assert!(k.announce("foo").expect("announce"));
    assert!(k.wait_joined("foo", T), "join never completed");
    cs.kill();
    let status = d.wait_exit(T).expect("the daemon outlived its corosync");
    assert!(!status.success(), "{status}");
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One corosync node, a fake kernel and our daemon under the push-back shim
/// (`tests/shim/cpg_pushback.c`): corosync answers TRY_AGAIN to `cpg_mcast_joined` while
/// `hold` exists and to `cpg_leave` while `hold_leave` exists, as it does with a full queue
/// or during a membership sync. With `plock_native=0`: a native node alone in its
/// lockspace would decide every request itself and send none.
struct PushBack {
    dir: std::path::PathBuf,
    hold: std::path::PathBuf,
    hold_leave: std::path::PathBuf,
    // dropped in this order: the daemon, the kernel, corosync
    d: Option<Daemon>,
    k: FakeKernel,
    cs: Corosync,
}

impl PushBack {
    /// Started with `env` added (the shim's variables are set here).
    fn start(tag: &str, env: &[(&str, &std::ffi::OsStr)]) -> Self {
        let cs = Corosync::start(tag);
        let dir = std::env::temp_dir().join(format!("dlm-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let shim = dlm_tests::build_c_shim(&dir, "cpg_pushback").expect("build the shim");
        let (hold, hold_leave) = (dir.join("hold"), dir.join("hold-leave"));
        let root = dir.join("root");
        let k = FakeKernel::start(&root).expect("fake kernel");
        std::fs::create_dir_all(root.join("etc/dlm")).expect("etc/dlm");
        std::fs::write(root.join("etc/dlm/dlm.conf"), "plock_native=0\n").expect("dlm.conf");
        let mut all = vec![
            ("LD_PRELOAD", shim.as_os_str()),
            ("DLM_PUSHBACK_FILE", hold.as_os_str()),
            ("DLM_PUSHBACK_LEAVE_FILE", hold_leave.as_os_str()),
        ];
        all.extend_from_slice(env);
        let d = Some(start(&cs, &root, &k, &all));
        Self {
            dir,
            hold,
            hold_leave,
            d,
            k,
            cs,
        }
    }

    fn join_foo(&self) {
        assert!(self.k.announce("foo").expect("announce"));
        assert!(self.k.wait_joined("foo", T), "join never completed");
    }

    fn metric(&self, series: &str) -> f64 {
        dlm_tests::metric_in_ns(&self.cs.netns, series)
    }
}

impl Drop for PushBack {
    fn drop(&mut self) {
        drop(self.d.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A LOCK of owner 7 on inode `number` of foo, bytes 0-9.
fn lock(number: u64) -> PlockInfo {
    dlm_tests::foo_request(PlockOp::LOCK, 7, number, false, 0, 9)
}

/// corosync pushing back: while `cpg_mcast_joined` answers CS_ERR_TRY_AGAIN, plock requests
/// wait in the lockspace's send queue, `dlm_cpg_send_queue` shows them and
/// `dlm_cpg_try_again_total` counts the retries; nothing is answered before it is ordered.
/// Once corosync takes messages again, every request is answered, in request order.
#[test]
fn pushed_back_requests_wait_in_the_send_queue() {
    let p = PushBack::start("pushback", &[]);
    p.join_foo();
    let series = |name: &str| p.metric(&format!("{name}{{lockspace=\"foo\"}}"));
    assert_eq!(series("dlm_cpg_try_again_total"), 0.0);

    std::fs::write(&p.hold, b"").expect("hold");
    let reqs: Vec<PlockInfo> = (0..20u64).map(|i| lock(1000 + i)).collect();
    for r in &reqs {
        p.k.send_plock(r).expect("send");
    }
    // queued, not answered: nothing was ordered. The queue counts messages (here one a
    // request; in native mode one carries the requests of a loop turn), the backlog
    // counts requests
    let queued = (0..100)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(50));
            p.metric("dlm_plock_backlog")
        })
        .find(|&q| q >= 20.0);
    assert_eq!(queued, Some(20.0), "the 20 requests never showed queued");
    assert!((1.0..=20.0).contains(&series("dlm_cpg_send_queue")));
    assert!(series("dlm_cpg_try_again_total") >= 1.0);
    assert!(p.k.recv_plock_raw(Duration::from_millis(300)).is_none());

    std::fs::remove_file(&p.hold).expect("release");
    for r in &reqs {
        let raw =
            p.k.recv_plock_raw(T)
                .expect("a reply once corosync takes messages");
        let got = PlockInfo::decode(&raw).expect("a plock record");
        assert_eq!((got.number, got.rv), (r.number, 0));
    }
    assert_eq!(series("dlm_cpg_send_queue"), 0.0);
}

/// A leave that corosync pushes back (`cpg_leave` answers TRY_AGAIN) is tried again until
/// corosync takes it; then the leave completes (event_done) as usual. It used to be logged
/// and forgotten: the unmount hung and the name stayed registered.
#[test]
fn a_pushed_back_leave_is_retried() {
    let p = PushBack::start("leaveback", &[]);
    p.join_foo();
    let dones = |r: &[Record]| writes(r, "sys/kernel/dlm/foo/event_done").len();
    assert_eq!(dones(&p.k.records()), 1);
    std::fs::write(&p.hold_leave, b"").expect("hold");
    p.k.release("foo").expect("offline uevent");
    assert!(
        !p.k.wait_records(Duration::from_millis(800), |r| dones(r) == 2),
        "the leave completed while corosync refused it"
    );
    std::fs::remove_file(&p.hold_leave).expect("release");
    assert!(
        p.k.wait_records(T, |r| dones(r) == 2),
        "the leave never completed once corosync took it"
    );
    assert_eq!(
        writes(&p.k.records(), "sys/kernel/dlm/foo/event_done")[1],
        b"0\0".to_vec()
    );
}

/// CLOSE unlocks need no reply, so a loop of open and close makes them at CPU speed; while
/// corosync pushes back they pile up. Past the backlog bound (4096) the daemon stops reading
/// the device — the kernel queues them, here the fake kernel's socket — and says so in
/// `dlm_plock_read_pauses_total`; once corosync takes messages all are processed, in order
/// (a LOCK sent after them is answered).
#[test]
fn the_plock_backlog_is_bounded() {
    let p = PushBack::start("backlog", &[]);
    p.join_foo();
    let close = |number| PlockInfo {
        flags: PlockFlags(1),
        ..dlm_tests::foo_request(PlockOp::UNLOCK, 7, number, false, 0, 9)
    };
    std::fs::write(&p.hold, b"").expect("hold");
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            for i in 0..6_000u64 {
                p.k.send_plock(&close(i)).expect("send a CLOSE");
            }
            p.k.send_plock(&lock(99_999)).expect("send a LOCK");
        });
        let paused = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            p.metric("dlm_plock_read_pauses_total") >= 1.0
        });
        let backlog = p.metric("dlm_plock_backlog");
        let queued = p.metric("dlm_cpg_send_queue{lockspace=\"foo\"}");
        // released before any assertion: a failure must not leave the sender blocked
        std::fs::remove_file(&p.hold).expect("release");
        sender.join().expect("sender");
        assert!(paused, "reading never paused");
        // the bound, give or take the read in flight and the LOCK
        assert!((4_000.0..=4_100.0).contains(&backlog), "backlog {backlog}");
        assert!(queued <= 4_100.0, "send queue {queued}");
    });
    let r = p.k.recv_plock(T).expect("the LOCK after them is answered");
    assert_eq!((r.number, r.rv), (99_999, 0));
    // everything done with: the backlog is empty again (none leaked). A task takes its share
    // out just after the reply it writes, so a scrape right after a reply may still see it:
    // a few more requests, apart
    let empty = (0..20u64).any(|i| {
        std::thread::sleep(Duration::from_millis(20));
        p.k.send_plock(&lock(99_000 + i)).expect("send");
        p.k.recv_plock(T).is_some_and(|r| r.rv == 0) && p.metric("dlm_plock_backlog") == 0.0
    });
    assert!(
        empty,
        "backlog {} queue {}",
        p.metric("dlm_plock_backlog"),
        p.metric("dlm_cpg_send_queue{lockspace=\"foo\"}")
    );
}

/// The daemon group's queue is flushed too: a RUN request multicast while corosync pushes
/// back waits in the queue and goes out once corosync takes messages again. It used to wait
/// forever behind the first TRY_AGAIN — and so would a FENCE_RESULT, keeping every
/// lockspace of the cluster in `wait fencing`.
#[test]
fn the_daemon_group_sends_what_corosync_pushed_back() {
    use std::os::unix::fs::PermissionsExt;
    // a fake `lvm` first in the daemon's PATH records what it is run with
    let bin = std::env::temp_dir().join(format!("dlm-dgpush-bin-{}", std::process::id()));
    std::fs::create_dir_all(&bin).expect("mkdir");
    let log = bin.join("lvm.log");
    let _ = std::fs::remove_file(&log);
    let lvm = bin.join("lvm");
    let script = format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display());
    std::fs::write(&lvm, script).expect("lvm");
    std::fs::set_permissions(&lvm, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let p = PushBack::start("dgpush", &[("PATH", std::ffi::OsStr::new(&path))]);
    std::fs::write(&p.hold, b"").expect("hold");
    let ours = std::path::Path::new(env!("CARGO_BIN_EXE_dlm_controld")).with_file_name("dlm_tool");
    let out = Command::new("ip")
        .args(["netns", "exec", &p.cs.netns])
        .arg(&ours)
        .args(["run_start", "-n", "lvm lvs"])
        .output()
        .expect("dlm_tool run_start");
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.contains("run_uuid: "), "{out}");
    std::thread::sleep(Duration::from_millis(500));
    let ran = || std::fs::read_to_string(&log).unwrap_or_default();
    let early = ran();
    std::fs::remove_file(&p.hold).expect("release");
    assert_eq!(early, "", "nothing runs while corosync pushes back");
    let end = std::time::Instant::now() + T;
    while ran().is_empty() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        ran(),
        "lvs\n",
        "the request went out once corosync took messages"
    );
    let _ = std::fs::remove_dir_all(&bin);
}
