//! The main job keeps working: `demo_cluster` (what `scripts/demo.sh` runs) completes every
//! step on three real corosync nodes and says so.

use std::process::Command;

#[test]
fn demo_cluster_completes() {
    let out = Command::new(env!("CARGO_BIN_EXE_demo_cluster"))
        .output()
        .expect("run demo_cluster");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("FAILED"), "{text}");
    assert!(
        text.contains("[ok] node 2 pid 2002: waiting lock granted"),
        "{text}"
    );
    assert!(
        text.contains("[ok] node 2 records node 3 as fenced by node 1"),
        "{text}"
    );
    assert!(
        text.contains("demo finished: every step happened as shown"),
        "{text}"
    );
}
