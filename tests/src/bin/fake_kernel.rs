//! `fake_kernel ROOT [--cycle] [LOCKSPACE...]`: serves a fake DLM kernel under ROOT for a
//! daemon started with `--kernel-root ROOT`, announces the named lockspaces once a daemon
//! listens for uevents, and prints every configfs/sysfs operation the daemon makes, one per
//! line. Without `--cycle` it runs until interrupted; with `--cycle` it waits for each join
//! to complete (`event_done`), releases the lockspaces, waits for the leaves, and exits 0
//! (1 if the daemon did not complete them within 30 s); it creates `ROOT/cycle.done` when
//! the leaves are done and exits once the daemon has closed the monitor device.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use dlm_tests::{FakeKernel, Record};

fn show(records: &[Record]) {
    for r in records {
        match r {
            Record::Mkdir(p) => println!("  mkdir {p}"),
            Record::Rmdir(p) => println!("  rmdir {p}"),
            Record::Write(p, b) if b.len() > 16 => {
                println!("  write {p} ({} bytes) {:02x?}…", b.len(), &b[..8])
            }
            Record::Write(p, b) => println!("  write {p} {:?}", String::from_utf8_lossy(b)),
        }
    }
}

fn event_dones(records: &[Record], ls: &str) -> usize {
    let path = format!("sys/kernel/dlm/{ls}/event_done");
    records
        .iter()
        .filter(|r| matches!(r, Record::Write(p, _) if *p == path))
        .count()
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(root) = args.next().map(PathBuf::from) else {
        eprintln!("usage: fake_kernel ROOT [--cycle] [LOCKSPACE...]");
        return ExitCode::from(2);
    };
    let mut cycle = false;
    let mut lockspaces = Vec::new();
    for a in args {
        if a == "--cycle" {
            cycle = true;
        } else {
            lockspaces.push(a);
        }
    }
    let k = match FakeKernel::start(&root) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("fake_kernel: {}: {e}", root.display());
            return ExitCode::from(1);
        }
    };
    let limit = Duration::from_secs(if cycle { 30 } else { 3600 });
    if !lockspaces.is_empty() && !k.wait_daemon(limit) {
        eprintln!("fake_kernel: no daemon connected");
        return ExitCode::from(1);
    }
    if cycle {
        println!("daemon started; what it wrote:");
        show(&k.records());
        for ls in &lockspaces {
            let seen = k.records().len();
            println!("\nkernel announces lockspace {ls} (online@ uevent); the daemon joins:");
            if k.announce(ls).is_err() || !k.wait_records(limit, |r| event_dones(r, ls) >= 1) {
                eprintln!("fake_kernel: the join of {ls} did not complete");
                return ExitCode::from(1);
            }
            show(&k.records()[seen..]);
        }
        for ls in &lockspaces {
            let seen = k.records().len();
            println!("\nkernel releases lockspace {ls} (offline@ uevent); the daemon leaves:");
            if k.release(ls).is_err() || !k.wait_records(limit, |r| event_dones(r, ls) >= 2) {
                eprintln!("fake_kernel: the leave of {ls} did not complete");
                return ExitCode::from(1);
            }
            show(&k.records()[seen..]);
        }
        // tell the caller, then stay until the daemon has gone (monitor closed)
        let _ = std::fs::write(root.join("cycle.done"), b"");
        let deadline = std::time::Instant::now() + limit;
        while k.monitor_open() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        return ExitCode::SUCCESS;
    }
    for ls in &lockspaces {
        if let Err(e) = k.announce(ls) {
            eprintln!("fake_kernel: announce {ls}: {e}");
        }
    }
    let mut seen = 0;
    loop {
        k.wait_records(Duration::from_secs(1), |r| r.len() > seen);
        let records = k.records();
        show(&records[seen..]);
        seen = records.len();
    }
}
