//! `dump_load [LOCKS]`: how long `dlm_tool plocks` takes to bring a whole table of LOCKS
//! locks (default 1,000,000) from our daemon (embedded group, fake kernel, a network
//! namespace of its own): the raw DUMP_PLOCKS exchange, our `dlm_tool plocks`, and
//! `dlm_tool plocks --json`. Needs root; finds `dlm_controld` and `dlm_tool` next to
//! itself. Results: docs/BENCHMARKS.md.

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::query::{Command, DlmcHeader, FLAG_UNCAPPED_DUMP, QUERY_SOCK_NAME};
use dlm_tests::{DaemonBuilder, FakeKernel, Netns, enter_netns};

fn main() -> ExitCode {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let Ok(ns) = Netns::new("dload") else {
        return ExitCode::FAILURE;
    };
    if enter_netns(&ns.0).is_err() {
        return ExitCode::FAILURE;
    }
    let root = std::env::temp_dir().join(format!("dlm-dload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let Ok(k) = FakeKernel::start(&root) else {
        return ExitCode::FAILURE;
    };
    let dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_default();
    let Ok(d) = DaemonBuilder::new(dir.join("dlm_controld"), &root)
        .embedded()
        .spawn(&ns.0)
    else {
        return ExitCode::FAILURE;
    };
    let _d = d;
    if !k.wait_daemon(Duration::from_secs(10))
        || !k.announce("big").unwrap_or(false)
        || !k.wait_joined("big", Duration::from_secs(10))
    {
        eprintln!("daemon or join failed");
        return ExitCode::FAILURE;
    }
    let Ok(name) = LockspaceName::new(b"big") else {
        return ExitCode::FAILURE;
    };
    let fsid = dlm_proto::wire::global_id(&name);
    let t = Instant::now();
    let lock = |i: u64| PlockInfo {
        version: PLOCK_VERSION,
        op: PlockOp::LOCK,
        ex: i % 2 == 0,
        wait: false,
        flags: PlockFlags(0),
        pid: 7,
        nodeid: 0,
        rv: 0,
        fsid,
        number: i / 10,
        start: (i % 10) * 100,
        end: (i % 10) * 100 + 49,
        owner: 7,
    };
    if !k.send_answered((0..n).map(lock), 256, Duration::from_secs(30)) {
        return ExitCode::FAILURE;
    }
    println!(
        "{n} locks on {} inodes taken in {:.1} s",
        n.div_ceil(10),
        t.elapsed().as_secs_f64()
    );

    // the raw exchange, as our dlm_tool makes it
    let t = Instant::now();
    let Ok(addr) = SocketAddr::from_abstract_name(QUERY_SOCK_NAME) else {
        return ExitCode::FAILURE;
    };
    let Ok(mut s) = UnixStream::connect_addr(&addr) else {
        return ExitCode::FAILURE;
    };
    let mut h = DlmcHeader::new(Command::DUMP_PLOCKS).with_name(b"big");
    h.flags |= FLAG_UNCAPPED_DUMP;
    let mut bytes = Vec::new();
    if s.write_all(&h.encode()).is_err() || s.read_to_end(&mut bytes).is_err() {
        return ExitCode::FAILURE;
    }
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    println!(
        "DUMP_PLOCKS: {lines} lines, {:.1} MiB in {:.3} s",
        bytes.len() as f64 / 1048576.0,
        t.elapsed().as_secs_f64()
    );
    for args in [&["plocks", "big"][..], &["plocks", "--json", "big"]] {
        let t = Instant::now();
        let Ok(out) = ns
            .command(&dir.join("dlm_tool").display().to_string())
            .args(args)
            .output()
        else {
            return ExitCode::FAILURE;
        };
        println!(
            "dlm_tool {}: {} lines, {:.1} MiB in {:.3} s",
            args.join(" "),
            out.stdout.iter().filter(|&&b| b == b'\n').count(),
            out.stdout.len() as f64 / 1048576.0,
            t.elapsed().as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&root);
    ExitCode::SUCCESS
}
