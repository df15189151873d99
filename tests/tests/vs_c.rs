//! The side-by-side bench runs end to end, briefly: `vs_c` with C's ownership mode and ours
//! (native mode) on one corosync node, one round of the own-files case, prints its table,
//! judges issue 14's targets and finds no reply of ours out of order. The rates themselves
//! are not asserted (on a shared machine a timed assertion is noise): that each target is
//! judged, and how, is.

use std::process::Command;

/// One round of `vs_c` for half a second: the daemons and cases of these `VS_KINDS` and
/// `VS_CASES` indexes; its table and its log, once it has succeeded.
fn vs_c(kinds: &str, cases: &str) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vs_c"))
        .arg("0.5")
        .env("VS_KINDS", kinds)
        .env("VS_CASES", cases)
        .env("VS_ROUNDS", "1")
        .env("VS_PROBE_SECS", "0.5")
        .output()
        .expect("run vs_c");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{text}\n{err}");
    (text, err)
}

#[test]
fn vs_c_prints_its_table_and_judges_the_targets() {
    let (text, err) = vs_c("24", "0");
    let case = "| 1 node, each process on its own file |";
    for daemon in ["C 4.2.0 plock_ownership=1", "ours (native mode)"] {
        assert!(text.contains(&format!("{case} {daemon} |")), "{text}");
    }
    // C's default mode did not run: only the target against its ownership mode is judged
    let judged: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(case) && l.contains('≥'))
        .collect();
    assert_eq!(judged.len(), 1, "{text}");
    let row = judged[0];
    assert!(
        row.contains("| native ≥ 1.3× C's ownership mode |"),
        "{row}"
    );
    let verdict = row.split('|').nth(5).map(str::trim);
    assert!(
        matches!(verdict, Some("met" | "**missed**")),
        "one round is met or missed: {row}"
    );
    // a missed target says where the time went, from our daemon's own hops
    if verdict == Some("**missed**") {
        assert!(row.contains("in our daemon"), "{row}");
    }
    assert!(
        text.contains("Replies of ours out of per-fsid order: none in 1 run (met)"),
        "{text}"
    );
    // the run's hops were read from our daemon's metrics
    assert!(
        err.contains("hops 1 node, each process on its own file / ours (native mode): request"),
        "{err}"
    );
}

#[test]
fn the_ceiling_runs_beside_our_c_compatible_daemon() {
    let (text, _) = vs_c("35", "3");
    let row = text
        .lines()
        .find(|l| l.starts_with("| 1 node, one process alone on its file | ceiling: "))
        .unwrap_or_else(|| panic!("no row of the ceiling: {text}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let ops: f64 = cells[3].parse().expect("ops/s");
    assert!(ops > 0.0, "the ceiling answered requests: {row}");
    assert_eq!(cells[8], "0", "its replies in order: {row}");
    assert_eq!(cells[10], "—", "no query socket, no probe: {row}");
    // our C-compatible daemon ran beside it, its replies in order, its queries probed in
    // a run of their own
    let ours = text
        .lines()
        .find(|l| {
            l.starts_with(
                "| 1 node, one process alone on its file | ours, plock_native=0 (C-compatible) |",
            )
        })
        .unwrap_or_else(|| panic!("no row of ours: {text}"));
    let probed = ours.split('|').map(str::trim).nth(10).unwrap_or_default();
    assert!(probed.ends_with(" µs") && probed.contains(" / "), "{ours}");
    assert!(
        text.contains("Replies of ours out of per-fsid order: none in 1 run (met)"),
        "{text}"
    );
}
