//! `cpg_ceiling <kernel-root>`: what any C-compatible daemon could reach on this machine,
//! for `vs_c`. It reads each plock request from the fake kernel's device, multicasts it
//! through a CPG group of its own (a message of C's size) and answers it when corosync
//! delivers it back — one CPG round trip per request and nothing else: no log line, no
//! metric, one thread polling two fds as C's daemon does. A C-compatible daemon must do at
//! least this (a C peer decides each request when it is delivered, so no node may answer
//! it sooner), so its rate is the ceiling of ours and of C's with `plock_native=0` or a C
//! peer in the lockspace.
//!
//! Its lock table knows only what `vs_c`'s cases ask: ranges of one inode either identical
//! or disjoint. A LOCK on a range another owner holds waits (F_SETLKW) or fails (-EAGAIN);
//! an UNLOCK releases the owner's ranges inside it, each granted to its oldest waiter.
//! Prints `ready` once joined; ends when the device closes.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dlm_cpg::{CorosyncGroup, CpgError, Event, Group};
use dlm_proto::kernel::{PLOCK_INFO_SIZE, PlockInfo, PlockOp};
use dlm_proto::wire::PLOCK_MSG_SIZE;
use dlm_tests::fake_kernel::daemon_end;
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{MsgFlags, recv, send};

/// Deliveries handled per wake-up before the device is looked at again.
const DISPATCH_BUDGET: usize = 64;

fn main() -> ExitCode {
    let Some(root) = std::env::args_os().nth(1) else {
        eprintln!("usage: cpg_ceiling <kernel-root>");
        return ExitCode::FAILURE;
    };
    let dev = match daemon_end(std::path::Path::new(&root)) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("cpg_ceiling: the fake kernel's device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut group = match join() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("cpg_ceiling: cpg_join: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("ready");
    match serve(&dev, &mut group) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cpg_ceiling: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Joins the ceiling's group, retrying while a corosync started a moment ago is not ready.
fn join() -> Result<CorosyncGroup, CpgError> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        match CorosyncGroup::join(b"vs_c_ceiling", false) {
            Err(e) if Instant::now() < until => {
                eprintln!("cpg_ceiling: join: {e}, again");
                std::thread::sleep(Duration::from_millis(200));
            }
            r => return r,
        }
    }
}

/// The loop: requests read go out as messages, delivered ones are decided and answered.
fn serve(dev: &OwnedFd, group: &mut CorosyncGroup) -> Result<(), String> {
    let cpg = group.as_raw_fd().map_err(|e| e.to_string())?;
    // SAFETY: libqb's fd stays open while `group` lives, which outlives this borrow.
    let cpg = unsafe { std::os::fd::BorrowedFd::borrow_raw(cpg) };
    let us = (group.local_nodeid(), std::process::id());
    let mut table = Table::default();
    let mut replies = Vec::new();
    loop {
        let mut fds = [
            PollFd::new(dev.as_fd(), PollFlags::POLLIN),
            PollFd::new(cpg, PollFlags::POLLIN),
        ];
        poll(&mut fds, PollTimeout::NONE).map_err(|e| format!("poll: {e}"))?;
        let ready = |i: usize| fds[i].revents().is_some_and(|r| !r.is_empty());
        if ready(0) && !read_requests(dev, group)? {
            return Ok(());
        }
        if ready(1) {
            group
                .dispatch_some(DISPATCH_BUDGET)
                .map_err(|e| e.to_string())?;
            while let Some(ev) = group.poll_event() {
                if let Event::Deliver {
                    nodeid,
                    pid,
                    payload,
                } = ev
                {
                    if (nodeid, pid) == us {
                        let record = payload.get(..PLOCK_INFO_SIZE).unwrap_or(&payload);
                        let info = PlockInfo::decode(record).map_err(|e| e.to_string())?;
                        burn();
                        table.apply(info, &mut replies);
                    }
                }
            }
            for r in replies.drain(..) {
                send(dev.as_raw_fd(), &r.encode(), MsgFlags::MSG_NOSIGNAL)
                    .map_err(|e| format!("reply: {e}"))?;
            }
        }
        group.flush().map_err(|e| e.to_string())?;
    }
}

/// Multicasts every request waiting on the device; false once the device has closed.
fn read_requests(dev: &OwnedFd, group: &mut CorosyncGroup) -> Result<bool, String> {
    let mut buf = [0u8; 128];
    loop {
        match recv(dev.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                let info = PlockInfo::decode(&buf[..n]).map_err(|e| e.to_string())?;
                burn();
                let mut msg = [0u8; PLOCK_MSG_SIZE];
                msg[..PLOCK_INFO_SIZE].copy_from_slice(&info.encode());
                group.mcast(&msg).map_err(|e| e.to_string())?;
            }
            Err(Errno::EAGAIN) => return Ok(true),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// `CEILING_BURN_US=<µs>`: user time spent on each request at its read and again at its
/// delivery, for calibration: what a daemon's own work per request costs the rate.
fn burn() {
    static US: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let us = *US.get_or_init(|| {
        std::env::var("CEILING_BURN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    });
    if us > 0 {
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(us) {
            std::hint::spin_loop();
        }
    }
}

/// A range's holder and its waiters, by (fsid, inode, start, end).
#[derive(Debug, Default)]
struct Table {
    ranges: BTreeMap<(u32, u64, u64, u64), Held>,
}

#[derive(Debug, Default)]
struct Held {
    owner: Option<u64>,
    waiters: VecDeque<PlockInfo>,
}

impl Table {
    /// Decides one delivered request; its reply (none for a close) and any grant it makes
    /// go to `out`.
    fn apply(&mut self, info: PlockInfo, out: &mut Vec<PlockInfo>) {
        let answer = |mut r: PlockInfo, rv: i32, out: &mut Vec<PlockInfo>| {
            r.rv = rv;
            out.push(r);
        };
        match info.op {
            PlockOp::LOCK => {
                let key = (info.fsid, info.number, info.start, info.end);
                let held = self.ranges.entry(key).or_default();
                match held.owner {
                    None => {
                        held.owner = Some(info.owner);
                        answer(info, 0, out);
                    }
                    Some(o) if o == info.owner => answer(info, 0, out),
                    Some(_) if info.wait => held.waiters.push_back(info),
                    Some(_) => answer(info, -libc::EAGAIN, out),
                }
            }
            PlockOp::UNLOCK => {
                self.release(&info, out);
                if !info.flags.close() {
                    answer(info, 0, out);
                }
            }
            _ => answer(info, 0, out),
        }
    }

    /// The owner's ranges inside the unlock's, each passed to its oldest waiter; a range
    /// left with neither is forgotten (only those the unlock touched are looked at).
    fn release(&mut self, info: &PlockInfo, out: &mut Vec<PlockInfo>) {
        let from = (info.fsid, info.number, info.start, 0);
        let to = (info.fsid, info.number, info.end, u64::MAX);
        let mut freed = Vec::new();
        for (key, held) in self.ranges.range_mut(from..=to) {
            if key.3 > info.end || held.owner != Some(info.owner) {
                continue;
            }
            held.owner = held.waiters.pop_front().map(|mut w| {
                w.rv = 0;
                out.push(w);
                w.owner
            });
            if held.owner.is_none() {
                freed.push(*key);
            }
        }
        for key in freed {
            self.ranges.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: PlockOp, owner: u64, start: u64, end: u64, wait: bool) -> PlockInfo {
        let mut info = dlm_tests::closed_loop::request(
            7,
            owner,
            dlm_tests::closed_loop::Step {
                op,
                number: 42,
                start,
                end,
                wait,
            },
        );
        info.owner = owner;
        info
    }

    fn apply(t: &mut Table, info: PlockInfo) -> Vec<(u64, PlockOp, i32)> {
        let mut out = Vec::new();
        t.apply(info, &mut out);
        out.iter().map(|r| (r.owner, r.op, r.rv)).collect()
    }

    #[test]
    fn a_held_range_makes_a_lock_wait_or_fail_and_its_unlock_grants_the_oldest_waiter() {
        let mut t = Table::default();
        assert_eq!(
            apply(&mut t, req(PlockOp::LOCK, 1, 0, 0, true)),
            [(1, PlockOp::LOCK, 0)]
        );
        assert_eq!(apply(&mut t, req(PlockOp::LOCK, 2, 0, 0, true)), []);
        assert_eq!(apply(&mut t, req(PlockOp::LOCK, 3, 0, 0, true)), []);
        let busy = -libc::EAGAIN;
        assert_eq!(
            apply(&mut t, req(PlockOp::LOCK, 4, 0, 0, false)),
            [(4, PlockOp::LOCK, busy)]
        );
        assert_eq!(
            apply(&mut t, req(PlockOp::UNLOCK, 1, 0, 0, false)),
            [(2, PlockOp::LOCK, 0), (1, PlockOp::UNLOCK, 0)]
        );
        assert_eq!(
            apply(&mut t, req(PlockOp::UNLOCK, 2, 0, u64::MAX, false)),
            [(3, PlockOp::LOCK, 0), (2, PlockOp::UNLOCK, 0)],
            "a whole-file unlock releases the range inside it"
        );
    }

    #[test]
    fn disjoint_ranges_never_wait_and_an_unlock_leaves_others_ranges_alone() {
        let mut t = Table::default();
        assert_eq!(
            apply(&mut t, req(PlockOp::LOCK, 1, 0, 9, false)),
            [(1, PlockOp::LOCK, 0)]
        );
        assert_eq!(
            apply(&mut t, req(PlockOp::LOCK, 2, 10, 19, false)),
            [(2, PlockOp::LOCK, 0)]
        );
        assert_eq!(
            apply(&mut t, req(PlockOp::UNLOCK, 1, 0, u64::MAX, false)),
            [(1, PlockOp::UNLOCK, 0)]
        );
        let busy = -libc::EAGAIN;
        assert_eq!(
            apply(&mut t, req(PlockOp::LOCK, 3, 10, 19, false)),
            [(3, PlockOp::LOCK, busy)]
        );
        assert_eq!(t.ranges.len(), 1, "owner 1's range is gone, owner 2's kept");
    }
}
