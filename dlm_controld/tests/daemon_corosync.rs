//! The daemon binary on real corosync (one node on loopback in a network namespace) and the
//! fake kernel: cluster name and comms entry from corosync, the daemon group, a lockspace
//! group `dlm:ls:foo\0` joined and left with the C daemon's configfs/sysfs bytes.

#[path = "../../cpg/tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use dlm_tests::{Daemon, FakeKernel, Record, writes};
use support::Corosync;

const T: Duration = Duration::from_secs(30);
const C: &str = "sys/kernel/config/dlm/cluster";

#[test]
fn lockspace_on_real_corosync() {
    let cs = Corosync::start("daemon");
    let dir = std::env::temp_dir().join(format!("dlm-daemon-cs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let k = FakeKernel::start(&dir).expect("fake kernel");
    // corosync needs a moment; the daemon fails fast if it cannot connect, so retry
    let mut d = None;
    for _ in 0..50 {
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &cs.netns,
                env!("CARGO_BIN_EXE_dlm_controld"),
            ])
            .args([
                "--kernel-root",
                &dir.display().to_string(),
                "--foreground",
                "-f",
                "0",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dlm_controld");
        if k.wait_daemon(Duration::from_secs(2)) {
            d = Some(Daemon(child));
            break;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut d = d.expect("the daemon came up on corosync");
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

    // SAFETY: signalling the child we started.
    unsafe { libc::kill(i32::try_from(d.0.id()).expect("pid"), libc::SIGTERM) };
    let status = (0..100)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            d.0.try_wait().expect("wait")
        })
        .expect("the daemon did not exit on SIGTERM");
    assert!(status.success());
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}
