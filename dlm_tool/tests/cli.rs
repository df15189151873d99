//! The binary's behaviour without a daemon: usage errors and an unreachable daemon exit
//! non-zero with the C tool's words where it has some. (Its output against a daemon is
//! compared byte for byte with the C tool in dlm_controld/tests/dlm_tool_real.rs, which
//! finds this binary next to its own; this test target also makes `cargo test` build it.)

use std::process::Command;

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn tool(ns: &str, args: &[&str]) -> (String, String, i32) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_dlm_tool")])
        .args(args)
        .output()
        .expect("run dlm_tool");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

#[test]
fn without_a_daemon() {
    // a namespace of our own: no daemon's abstract sockets in it
    let ns = Netns(format!("dlmtool-{}", std::process::id()));
    assert!(
        Command::new("ip")
            .args(["netns", "add", &ns.0])
            .status()
            .expect("ip")
            .success()
    );
    let (out, err, code) = tool(&ns.0, &["status"]);
    assert_eq!(
        (out.as_str(), code),
        ("cannot connect to dlm_controld\n", 1)
    );
    assert!(err.contains("cannot talk to dlm_controld"), "{err}");
    let (out, _, code) = tool(&ns.0, &["ls"]);
    assert_eq!((out.as_str(), code), ("", 1));
    let (out, _, code) = tool(&ns.0, &["set_config", "log_debug=1"]);
    assert_eq!((out.as_str(), code), ("set_config failed\n", 1));
    let (out, _, code) = tool(&ns.0, &["reload_config"]);
    assert_eq!((out.as_str(), code), ("reload_config failed\n", 1));
    let (_, err, code) = tool(&ns.0, &["plocks"]);
    assert_eq!(code, 1);
    assert!(err.contains("lockspace name required"), "{err}");
    let (out, err, code) = tool(&ns.0, &["fence_ack", "2"]);
    assert_eq!((out.as_str(), code), ("", 1));
    assert!(err.contains("cannot talk to dlm_controld"), "{err}");
    // lockdump of a lockspace the kernel does not have: an error and exit 1 (C exits 0)
    let (_, err, code) = tool(&ns.0, &["--kernel-root", "/nonexistent", "lockdump", "foo"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("can't open /nonexistent/sys/kernel/debug/dlm/foo_locks"),
        "{err}"
    );
    // join without a DLM kernel: C's words and exit(-1)
    let (out, err, code) = tool(&ns.0, &["--kernel-root", "/nonexistent", "join", "foo"]);
    assert_eq!(out, "Joining lockspace \"foo\" permission 600 \n");
    assert!(err.starts_with("dlm_new_lockspace foo error 2"), "{err}");
    assert_eq!(code, 255);
    let (out, _, code) = tool(&ns.0, &["-h"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("Usage: dlm_tool"), "{out}");
}
