//! Data-driven scenario scripts (`plock/testdata/*.txt`), raft-rs style: each block is one
//! or more commands, a `----` line, then the expected output. Three nodes apply every
//! command; the output lists the replies each node writes, then node 1's dump. Every step
//! also runs the reference model and requires equal replies, dumps and replica digests.
//!
//! Commands (`n` node, `o` owner, `ino` resource; ranges `S-E` with `eof` for the kernel's
//! OFFSET_MAX):
//!   lock n=1 o=1 ino=1 0-9 wr|rd [wait] [pid=N]
//!   unlock n=1 o=1 ino=1 0-9 [close] [pid=N]
//!   get n=1 o=1 ino=1 0-9 wr|rd
//!   cancel n=1 o=1 ino=1 0-9 wr|rd [pid=N]
//!   op=9 n=1 o=1 ino=1 0-9        (an op no kernel sends)
//!   purge n=2
//!   deadlock on|off               (deadlock detection on every replica, as a started
//!                                  change agrees it)
//!
//! `DLM_REWRITE=1 cargo test -p dlm-plock --test scripts` rewrites the expectations; review
//! the diff against plock-spec before committing it.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss
)]

mod model;

use std::fmt::Write as _;
use std::path::PathBuf;

use dlm_plock::Lockspace;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use model::Model;

const FSID: u32 = 7;
const EOF: u64 = 0x7fff_ffff_ffff_ffff;

struct World {
    engines: Vec<Lockspace>,
    models: Vec<Model>,
}

fn parse_range(s: &str) -> (u64, u64) {
    let (a, b) = s.split_once('-').expect("range S-E");
    let num = |x: &str| {
        if x == "eof" {
            EOF
        } else {
            x.parse().expect("number")
        }
    };
    (num(a), num(b))
}

fn parse(line: &str) -> Result<(Option<PlockInfo>, Option<u32>), String> {
    let mut words = line.split_whitespace();
    let cmd = words.next().ok_or("empty command")?;
    let mut info = PlockInfo {
        version: PLOCK_VERSION,
        op: PlockOp::LOCK,
        ex: false,
        wait: false,
        flags: PlockFlags(0),
        pid: 100,
        nodeid: 0,
        rv: 0,
        fsid: FSID,
        number: 0,
        start: 0,
        end: 0,
        owner: 0,
    };
    info.op = match cmd {
        "lock" => PlockOp::LOCK,
        "unlock" => PlockOp::UNLOCK,
        "get" => PlockOp::GET,
        "cancel" => PlockOp::CANCEL,
        "purge" => PlockOp(0),
        c if c.starts_with("op=") => PlockOp(c[3..].parse().map_err(|_| "op")?),
        other => return Err(format!("unknown command {other}")),
    };
    for w in words {
        match w.split_once('=') {
            Some(("n", v)) => info.nodeid = v.parse().map_err(|_| "n")?,
            Some(("o", v)) => info.owner = v.parse().map_err(|_| "o")?,
            Some(("ino", v)) => info.number = v.parse().map_err(|_| "ino")?,
            Some(("pid", v)) => info.pid = v.parse().map_err(|_| "pid")?,
            Some((k, _)) => return Err(format!("unknown key {k}")),
            None => match w {
                "wr" => info.ex = true,
                "rd" => info.ex = false,
                "wait" => info.wait = true,
                "close" => info.flags = PlockFlags(PlockFlags::CLOSE),
                r if r.contains('-') => (info.start, info.end) = parse_range(r),
                other => return Err(format!("unknown word {other}")),
            },
        }
    }
    if cmd == "purge" {
        return Ok((None, Some(u32::try_from(info.nodeid).map_err(|_| "n")?)));
    }
    Ok((Some(info), None))
}

fn op_name(op: PlockOp) -> String {
    match op {
        PlockOp::LOCK => "lock".into(),
        PlockOp::UNLOCK => "unlock".into(),
        PlockOp::GET => "get".into(),
        PlockOp::CANCEL => "cancel".into(),
        PlockOp(n) => format!("op={n}"),
    }
}

fn show_end(e: u64) -> String {
    if e == EOF {
        "eof".into()
    } else {
        e.to_string()
    }
}

impl World {
    fn new() -> Self {
        Self {
            engines: (1..=3)
                .map(|n| Lockspace::new(n, FSID, u64::from(n) * 0x1234_5677))
                .collect(),
            models: (1..=3).map(|n| Model::new(n, FSID)).collect(),
        }
    }

    fn run(&mut self, line: &str, now: u64, out: &mut String) -> Result<(), String> {
        if let Some(v) = line.strip_prefix("deadlock ") {
            let on = v.trim() == "on";
            self.engines
                .iter_mut()
                .for_each(|e| e.set_deadlock_detect(on));
            self.models.iter_mut().for_each(|m| m.deadlock = on);
            return Ok(());
        }
        let (msg, purge) = parse(line)?;
        for (e, m) in self.engines.iter_mut().zip(&mut self.models) {
            let mut got = Vec::new();
            let mut want = Vec::new();
            if let Some(msg) = msg {
                let from = u32::try_from(msg.nodeid).map_err(|_| "n")?;
                e.apply(now, from, &msg, &mut got)
                    .map_err(|x| x.to_string())?;
                m.apply(&msg, &mut want);
            }
            if let Some(n) = purge {
                e.purge_node(now, n, &mut got);
                m.purge(n as i32, &mut want);
            }
            let got: Vec<PlockInfo> = got.into_iter().map(|r| r.info).collect();
            if got != want {
                return Err(format!(
                    "node {}: engine replies {got:?}, model {want:?}",
                    m.our
                ));
            }
            if e.dump_text() != m.dump() {
                return Err(format!(
                    "node {}: engine dump\n{}model dump\n{}",
                    m.our,
                    e.dump_text(),
                    m.dump()
                ));
            }
            for r in got {
                let _ = write!(
                    out,
                    "reply n={} {} {}-{} {} rv={}",
                    r.nodeid,
                    op_name(r.op),
                    r.start,
                    show_end(r.end),
                    if r.ex { "wr" } else { "rd" },
                    r.rv
                );
                if r.op == PlockOp::GET && r.rv == 1 {
                    let _ = write!(out, " (pid {})", r.pid);
                }
                out.push('\n');
            }
        }
        let d = self.engines[0].digest();
        if self.engines.iter().any(|e| e.digest() != d) {
            return Err("replica digests differ".into());
        }
        Ok(())
    }
}

fn run_file(path: &PathBuf) -> (String, String) {
    let text = std::fs::read_to_string(path).expect("read script");
    let mut world = World::new();
    let mut rewritten = String::new();
    let mut problems = String::new();
    let mut lines = text.lines().peekable();
    let mut now = 0;
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.starts_with('#') {
            rewritten.push_str(line);
            rewritten.push('\n');
            continue;
        }
        // a block: commands up to ----, then expected output up to a blank line
        let mut cmds = vec![line];
        for l in lines.by_ref() {
            if l == "----" {
                break;
            }
            cmds.push(l);
        }
        let mut expected = String::new();
        while let Some(l) = lines.peek() {
            if l.trim().is_empty() {
                break;
            }
            expected.push_str(l);
            expected.push('\n');
            lines.next();
        }
        let mut got = String::new();
        for c in &cmds {
            now += 1;
            if let Err(e) = world.run(c, now, &mut got) {
                let _ = writeln!(problems, "{}: `{c}`: {e}", path.display());
            }
        }
        let dump = world.engines[0].dump_text();
        if dump.is_empty() {
            got.push_str("(no locks)\n");
        } else {
            got.push_str(&dump);
        }
        if got != expected {
            let _ = writeln!(
                problems,
                "{}: after\n  {}\nexpected:\n{}got:\n{}",
                path.display(),
                cmds.join("\n  "),
                expected,
                got
            );
        }
        for c in &cmds {
            rewritten.push_str(c);
            rewritten.push('\n');
        }
        rewritten.push_str("----\n");
        rewritten.push_str(&got);
    }
    (rewritten, problems)
}

#[test]
fn scripts() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("plock/testdata")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 8,
        "expected the scenario scripts, found {files:?}"
    );
    let rewrite = std::env::var("DLM_REWRITE").is_ok_and(|v| v == "1");
    let mut all = String::new();
    for f in &files {
        let (rewritten, problems) = run_file(f);
        if rewrite {
            std::fs::write(f, rewritten).expect("rewrite script");
        } else {
            all.push_str(&problems);
        }
    }
    assert!(all.is_empty(), "{all}");
}
