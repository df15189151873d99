//! The daemon as Pacemaker's `ocf:pacemaker:controld` agent (pacemaker's
//! `agents/ocf/controld.in`) drives it, on the fake kernel with the embedded group: start
//! is `dlm_controld -s 0` without `--foreground`, which must return once the daemon runs in
//! the background; monitor is `killall -0 dlm_controld` (a process of that name) and the
//! value of `dlm_tool status -v`'s `stateful_merge_wait=` line as `grep
//! "stateful_merge_wait=" | cut -d= -f2` reads it (1 fails the monitor); stop is `killall
//! -TERM dlm_controld` and a wait until it has gone. The real-kernel run under Pacemaker is
//! `tests/vm/run-stack.sh pacemaker` (docs/real-kernel.md).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use dlm_tests::{FakeKernel, Netns};

const T: Duration = Duration::from_secs(20);

fn root(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dlm-pcmk-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Our `dlm_tool ARGS` in `ns`: its stdout.
fn tool(ns: &Netns, args: &[&str]) -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_dlm_controld")).with_file_name("dlm_tool");
    let out = ns
        .command(&bin.display().to_string())
        .args(args)
        .output()
        .expect("dlm_tool");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `grep "stateful_merge_wait=" | cut -d= -f2` over `text`: the second `=`-field of each
/// matching line (the agent compares it with 1).
fn smw(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains("stateful_merge_wait="))
        .map(|l| l.split('=').nth(1).unwrap_or("").to_owned())
        .collect()
}

/// Whether process `pid` still exists.
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only probes for the process.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn start_monitor_and_stop_as_the_controld_agent_does() {
    let dir = root("agent");
    let k = FakeKernel::start(&dir).expect("fake kernel");
    let ns = Netns::new("pcmk").expect("netns");
    // start: `dlm_controld -s 0` returns, the daemon in the background
    let mut start = ns
        .command(env!("CARGO_BIN_EXE_dlm_controld"))
        .args([
            "--kernel-root",
            &dir.display().to_string(),
            "--cluster",
            "embedded",
            "-s",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run");
    let mut status = None;
    for _ in 0..200 {
        status = start.try_wait().expect("wait");
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if status.is_none() {
        let _ = start.kill();
        let _ = start.wait();
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "the agent's start command returns 0 at once: {status:?}"
    );
    assert!(k.wait_daemon(T));
    let pid: i32 = std::fs::read_to_string(dir.join("run/dlm_controld/dlm_controld.pid"))
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    // monitor: `killall -0 dlm_controld` finds it by its name
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .expect("comm")
            .trim_end(),
        "dlm_controld"
    );
    // monitor: the agent polls until `status -v` answers with the key at 0
    let mut seen = Vec::new();
    for _ in 0..200 {
        seen = smw(&tool(&ns, &["status", "-v"]));
        if !seen.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        seen,
        vec!["0".to_owned()],
        "one stateful_merge_wait= line, 0"
    );
    // -s 0: startup fencing off, from the command line
    let config = tool(&ns, &["dump_config"]);
    assert!(
        config.contains("\nenable_startup_fencing=0 (cli option)\n"),
        "{config}"
    );
    // stop: SIGTERM with no lockspace left ends it
    // SAFETY: signalling the daemon this test started (its pid from its own pid file).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let gone = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        !alive(pid)
    });
    assert!(gone, "the daemon did not end on SIGTERM");
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}
