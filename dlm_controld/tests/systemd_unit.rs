//! systemd/dlm.service is a valid unit, and its start-up contract matches the daemon's:
//! Type=notify with NotifyAccess=main needs `--foreground` (the daemon forks otherwise, and
//! READY=1 would come from a child systemd ignores); SIGKILL must not follow SIGTERM,
//! which the daemon ignores while lockspaces exist.

use std::process::Command;

const UNIT: &str = include_str!("../../systemd/dlm.service");

fn value<'a>(key: &str) -> Vec<&'a str> {
    UNIT.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

#[test]
fn unit_verifies_and_matches_the_daemon() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/dlm.service");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (package systemd)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(value("Type"), ["notify"]);
    assert_eq!(value("NotifyAccess"), ["main"]);
    let exec = value("ExecStart");
    assert_eq!(exec.len(), 1);
    assert!(exec[0].starts_with("/usr/sbin/dlm_controld "), "{exec:?}");
    assert!(
        exec[0].split_whitespace().any(|w| w == "--foreground"),
        "{exec:?}"
    );
    assert_eq!(value("SendSIGKILL"), ["no"]);
    // the daemon feeds the watchdog at half the interval from a loop that ticks each second
    let wd: Vec<u64> = value("WatchdogSec")
        .iter()
        .map(|v| v.parse().expect("seconds"))
        .collect();
    assert!(
        wd.len() == 1 && wd[0] >= 10,
        "one WatchdogSec of 10 s or more: {wd:?}"
    );
    // systemd's default soft limit is 1024: room for the kernel path beside the bounded
    // local connections (admission's reserve of 256 and total of 512)
    let nofile: Vec<u64> = value("LimitNOFILE")
        .iter()
        .map(|v| v.parse().expect("a number"))
        .collect();
    assert!(nofile.len() == 1 && nofile[0] >= 4096, "{nofile:?}");
    // the options the unit passes are ones our daemon accepts
    let ours = Command::new(env!("CARGO_BIN_EXE_dlm_controld"))
        .args(["--foreground", "--help"])
        .output()
        .expect("dlm_controld");
    assert!(ours.status.success());
}
