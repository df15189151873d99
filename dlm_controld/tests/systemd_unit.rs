//! systemd/dlm.service is a valid unit, and its start-up contract matches the daemon's:
//! Type=notify with NotifyAccess=main needs `--foreground` (the daemon forks otherwise, and
//! READY=1 would come from a child systemd ignores); SIGKILL must not follow SIGTERM,
//! which the daemon ignores while lockspaces exist. The Debian package installs no unit but
//! a drop-in for Debian's (systemd/dlm-controld-rs.conf): the two together must say the same.

use std::process::Command;

const UNIT: &str = include_str!("../../systemd/dlm.service");
const DROP_IN: &str = include_str!("../../systemd/dlm-controld-rs.conf");

/// The values of `key` in `unit`, in order (a drop-in's come after the unit's).
fn values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

fn verify(path: &std::path::Path, unit_path: Option<&std::path::Path>) {
    let mut cmd = Command::new("systemd-analyze");
    cmd.arg("verify").arg(path);
    if let Some(dir) = unit_path {
        // the drop-in directory beside the unit is read from the unit search path
        cmd.env("SYSTEMD_UNIT_PATH", format!("{}:", dir.display()));
    }
    let out = cmd.output().expect("systemd-analyze (package systemd)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn unit_verifies_and_matches_the_daemon() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/dlm.service");
    verify(&path, None);
    matches_the_daemon(UNIT);
}

#[test]
fn debians_unit_with_our_drop_in_matches_the_daemon() {
    // Debian's dlm-controld (scripts/deps.sh installs it) has its unit in one of these
    let debian = [
        "/lib/systemd/system/dlm.service",
        "/usr/lib/systemd/system/dlm.service",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("Debian's dlm.service (package dlm-controld)");
    let unit = std::fs::read_to_string(debian).expect("read");
    let dir = std::env::temp_dir().join(format!("dlm-unit-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("dlm.service.d")).expect("mkdir");
    std::fs::write(dir.join("dlm.service"), &unit).expect("write");
    std::fs::write(dir.join("dlm.service.d/dlm-controld-rs.conf"), DROP_IN).expect("write");
    verify(&dir.join("dlm.service"), Some(&dir));
    let _ = std::fs::remove_dir_all(&dir);
    // Debian's unit lacks the two lines; the drop-in supplies them
    assert!(values(&unit, "WatchdogSec").is_empty() && values(&unit, "LimitNOFILE").is_empty());
    matches_the_daemon(&format!("{unit}\n{DROP_IN}"));
}

fn matches_the_daemon(unit: &str) {
    let value = |key| values(unit, key);
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
