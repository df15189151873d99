//! `fake_kernel ROOT [LOCKSPACE...]`: serves a fake DLM kernel under ROOT for a daemon
//! started with `--kernel-root ROOT`, announces the named lockspaces once a daemon listens
//! for uevents, and prints every configfs/sysfs operation the daemon makes, one per line,
//! until interrupted.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use dlm_tests::{FakeKernel, Record};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(root) = args.next().map(PathBuf::from) else {
        eprintln!("usage: fake_kernel ROOT [LOCKSPACE...]");
        return ExitCode::from(2);
    };
    let k = match FakeKernel::start(&root) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("fake_kernel: {}: {e}", root.display());
            return ExitCode::from(1);
        }
    };
    let lockspaces: Vec<String> = args.collect();
    if !lockspaces.is_empty() && !k.wait_daemon(Duration::from_secs(3600)) {
        eprintln!("fake_kernel: no daemon connected");
        return ExitCode::from(1);
    }
    for ls in lockspaces {
        if let Err(e) = k.announce(&ls) {
            eprintln!("fake_kernel: announce {ls}: {e}");
        }
    }
    let mut seen = 0;
    loop {
        k.wait_records(Duration::from_secs(1), |r| r.len() > seen);
        let records = k.records();
        for r in &records[seen..] {
            match r {
                Record::Mkdir(p) => println!("mkdir {p}"),
                Record::Rmdir(p) => println!("rmdir {p}"),
                Record::Write(p, b) => println!("write {p} {b:02x?}"),
            }
        }
        seen = records.len();
    }
}
