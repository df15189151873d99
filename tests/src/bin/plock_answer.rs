//! `plock_answer DEVICE`: answers every request of a plock device at once — rv 0, nothing
//! locked; a `poll`, a read and a write per request (the device's read does not block: it
//! says EAGAIN when no request waits) — for a guest with a real kernel
//! (`CEILING=1 tests/vm/run-one.sh`). The rate of a process's lock+unlock pairs against it
//! is what no daemon can pass on that guest: the kernel's work and the process's are all
//! that is left. Only while the daemon is stopped (its reader would race this one) and only
//! for a process locking alone (every lock is granted). A close's unlock
//! (`DLM_PLOCK_FL_CLOSE`) gets no reply, as the kernel expects none.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::process::ExitCode;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use dlm_proto::kernel::{PLOCK_INFO_SIZE, PlockInfo};

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: plock_answer <plock device>");
        return ExitCode::FAILURE;
    };
    let mut dev = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("plock_answer: {}: {e}", path.to_string_lossy());
            return ExitCode::FAILURE;
        }
    };
    let mut buf = [0u8; PLOCK_INFO_SIZE];
    let mut answered = 0u64;
    loop {
        let n = match dev.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fds = [PollFd::new(dev.as_fd(), PollFlags::POLLIN)];
                if let Err(e) = poll(&mut fds, PollTimeout::NONE) {
                    eprintln!("plock_answer: poll: {e}");
                    break;
                }
                continue;
            }
            Err(e) => {
                eprintln!("plock_answer: read: {e}");
                break;
            }
        };
        let Some(reply) = answer(&buf[..n]) else {
            continue;
        };
        if let Err(e) = dev.write_all(&reply) {
            eprintln!("plock_answer: write: {e}");
            break;
        }
        answered += 1;
    }
    println!("answered {answered}");
    ExitCode::SUCCESS
}

/// The reply to one request: itself with rv 0; none for a close or a malformed record.
fn answer(record: &[u8]) -> Option<[u8; PLOCK_INFO_SIZE]> {
    let mut info = PlockInfo::decode(record).ok()?;
    if info.flags.close() {
        return None;
    }
    info.rv = 0;
    Some(info.encode())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlm_proto::kernel::{PlockFlags, PlockOp};

    #[test]
    fn every_request_but_a_close_is_answered_with_rv_0() {
        let step = |op| dlm_tests::closed_loop::Step {
            op,
            number: 9,
            start: 0,
            end: 0,
            wait: true,
        };
        let mut lock = dlm_tests::closed_loop::request(3, 77, step(PlockOp::LOCK));
        lock.rv = -11;
        let reply = PlockInfo::decode(&answer(&lock.encode()).expect("answered")).expect("decodes");
        assert_eq!(reply, PlockInfo { rv: 0, ..lock });
        let mut close = dlm_tests::closed_loop::request(3, 77, step(PlockOp::UNLOCK));
        close.flags = PlockFlags(PlockFlags::CLOSE);
        assert_eq!(answer(&close.encode()), None);
        assert_eq!(answer(&[0u8; 10]), None, "not a record");
    }
}
