//! `plock_answer DEVICE [poll|tokio|tokio-handoff|poll-engine]`: answers every request of a plock device
//! at once — rv 0, nothing locked — for a guest with a real kernel (`CEILING=1
//! tests/vm/run-one.sh`). The rate of a process's lock+unlock pairs against it is what no
//! daemon can pass on that guest: the kernel's work and the process's are all that is left.
//! Only while the daemon is stopped (its reader would race this one) and only for a process
//! locking alone (every lock is granted). A close's unlock (`DLM_PLOCK_FL_CLOSE`) gets no
//! reply, as the kernel expects none.
//!
//! How it waits for requests (the device's read does not block: it says EAGAIN when none
//! waits): `poll` (the default) a `poll`, a read and a write per request, as C's loop;
//! `tokio` the same reads and writes from a task of a current-thread tokio runtime woken
//! through its reactor (`epoll`), as our daemon's reader is; `tokio-handoff` that task hands
//! each request to a second task, which writes the reply, as our reader hands requests to a
//! lockspace's task; `poll-engine` the `poll` loop deciding each request with our plock
//! engine (`dlm_plock`, one table per fsid, the requests as a one-node lockspace's own) and
//! writing its replies: what a loop of that shape with our engine in it, and none of the
//! daemon's bookkeeping, would reach. What separates them is the cost of the skeleton alone
//! and of the engine (`CEILING=variants`). Two calibrations price what a request path is
//! made of under emulation: `poll-pages:N` is `poll` writing one byte to each of N pages of
//! its own per request (what each page a request touches costs after the address-space
//! switch before it), `poll-calls:N` (N up to 256) is `poll` making N calls per request, each
//! from a call site of its own to a function of its own, all within a few pages of code
//! (what each distinct return costs); `CEILING_WAYS` of `run-one.sh` picks the ways.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::process::ExitCode;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use dlm_proto::kernel::{PLOCK_INFO_SIZE, PlockInfo};

/// How the answerer waits for requests (see the crate's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Poll,
    Tokio,
    TokioHandoff,
    PollEngine,
    PollPages(usize),
    PollCalls(usize),
}

impl How {
    fn parse(arg: Option<&str>) -> Option<Self> {
        match arg {
            None | Some("poll") => Some(Self::Poll),
            Some("tokio") => Some(Self::Tokio),
            Some("tokio-handoff") => Some(Self::TokioHandoff),
            Some("poll-engine") => Some(Self::PollEngine),
            Some(other) => {
                let (way, n) = other.split_once(':')?;
                let n = n.parse().ok()?;
                match way {
                    "poll-pages" => Some(Self::PollPages(n)),
                    "poll-calls" if n <= calls::MAX => Some(Self::PollCalls(n)),
                    _ => None,
                }
            }
        }
    }
}

fn main() -> ExitCode {
    let usage = "usage: plock_answer <plock device> \
                 [poll|tokio|tokio-handoff|poll-engine|poll-pages:N|poll-calls:N]";
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("{usage}");
        return ExitCode::FAILURE;
    };
    let Some(how) = How::parse(std::env::args().nth(2).as_deref()) else {
        eprintln!("{usage}");
        return ExitCode::FAILURE;
    };
    let dev = match std::fs::OpenOptions::new()
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
    match serve(dev, how) {
        Ok(answered) => {
            println!("answered {answered}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("plock_answer: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Answers the device's requests until it ends (a read of 0 bytes); how many were answered.
fn serve(dev: std::fs::File, how: How) -> std::io::Result<u64> {
    match how {
        How::Poll => serve_poll(&dev, &mut Answer::Granted),
        How::PollEngine => serve_poll(&dev, &mut Answer::Engine(Engine::new())),
        How::PollPages(n) => serve_poll(&dev, &mut Answer::Pages(vec![0; n * PAGE])),
        How::PollCalls(n) => serve_poll(&dev, &mut Answer::Calls(n)),
        How::Tokio | How::TokioHandoff => tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?
            .block_on(serve_tokio(dev.into(), how == How::TokioHandoff)),
    }
}

/// C's loop: a read, and on EAGAIN a `poll` with no timeout.
fn serve_poll(mut dev: &std::fs::File, how: &mut Answer) -> std::io::Result<u64> {
    let mut buf = [0u8; PLOCK_INFO_SIZE];
    let mut replies = Vec::new();
    let mut answered = 0u64;
    loop {
        let n = match dev.read(&mut buf) {
            Ok(0) => return Ok(answered),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fds = [PollFd::new(dev.as_fd(), PollFlags::POLLIN)];
                poll(&mut fds, PollTimeout::NONE)?;
                continue;
            }
            Err(e) => return Err(e),
        };
        how.replies(&buf[..n], &mut replies);
        for reply in replies.drain(..) {
            dev.write_all(&reply)?;
            answered += 1;
        }
    }
}

/// How a request is answered: granted as it is, or decided by our engine; or granted
/// after touching pages of a buffer, or after calls.
enum Answer {
    Granted,
    Engine(Engine),
    Pages(Vec<u8>),
    Calls(usize),
}

const PAGE: usize = 4096;

/// Our plock engine's tables, one per fsid, with this node as node 1 (the `nodeid` each
/// request is given, as the daemon gives its own).
struct Engine {
    /// The engine's clock starts with the answerer.
    start: std::time::Instant,
    tables: std::collections::BTreeMap<u32, dlm_plock::Lockspace>,
    /// The engine's replies to one request, kept for the next.
    decided: Vec<dlm_plock::Reply>,
}

impl Answer {
    /// The replies to one record, in order, into `out`.
    fn replies(&mut self, record: &[u8], out: &mut Vec<[u8; PLOCK_INFO_SIZE]>) {
        match self {
            Self::Granted => out.extend(answer(record)),
            Self::Engine(e) => e.decide(record, out),
            Self::Pages(buf) => {
                for page in buf.chunks_mut(PAGE) {
                    page[0] = page[0].wrapping_add(1);
                }
                std::hint::black_box(&buf);
                out.extend(answer(record));
            }
            Self::Calls(n) => {
                std::hint::black_box(calls::make(*n, record.len() as u64));
                out.extend(answer(record));
            }
        }
    }
}

impl Engine {
    fn new() -> Self {
        Self {
            start: std::time::Instant::now(),
            tables: std::collections::BTreeMap::new(),
            decided: Vec::new(),
        }
    }

    fn decide(&mut self, record: &[u8], out: &mut Vec<[u8; PLOCK_INFO_SIZE]>) {
        let Ok(mut info) = PlockInfo::decode(record) else {
            return;
        };
        info.nodeid = 1;
        let now_ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let table = self
            .tables
            .entry(info.fsid)
            .or_insert_with(|| dlm_plock::Lockspace::new(1, info.fsid, 0));
        // a request that names node 1 from node 1 is never refused
        let _ = table.apply(now_ms, 1, &info, &mut self.decided);
        out.extend(self.decided.drain(..).map(|r| r.info.encode()));
    }
}

/// `poll-calls:N`: the first N of 256 calls, each from a call site of its own to a function
/// of its own.
mod calls {
    pub(super) const MAX: usize = 256;

    #[inline(never)]
    fn leaf<const I: u64>(x: u64) -> u64 {
        std::hint::black_box(x.rotate_left(1) ^ I)
    }

    macro_rules! chain {
        ($n:ident, $x:ident; $($i:literal)*) => {
            $(
                if $i >= $n {
                    return $x;
                }
                $x = leaf::<$i>($x);
            )*
        };
    }

    #[inline(never)]
    pub(super) fn make(n: usize, mut x: u64) -> u64 {
        let n = n as u64;
        chain!(n, x; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95 96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127 128 129 130 131 132 133 134 135 136 137 138 139 140 141 142 143 144 145 146 147 148 149 150 151 152 153 154 155 156 157 158 159 160 161 162 163 164 165 166 167 168 169 170 171 172 173 174 175 176 177 178 179 180 181 182 183 184 185 186 187 188 189 190 191 192 193 194 195 196 197 198 199 200 201 202 203 204 205 206 207 208 209 210 211 212 213 214 215 216 217 218 219 220 221 222 223 224 225 226 227 228 229 230 231 232 233 234 235 236 237 238 239 240 241 242 243 244 245 246 247 248 249 250 251 252 253 254 255);
        x
    }
}

/// The device for tokio's reactor: the registration holds the file open.
struct Fd(std::sync::Arc<std::fs::File>);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A task woken by tokio's reactor reads until EAGAIN; it writes each reply itself, or
/// (`handoff`) hands it to a second task, spawned on the runtime, that writes it.
async fn serve_tokio(dev: std::sync::Arc<std::fs::File>, handoff: bool) -> std::io::Result<u64> {
    // SAFETY: the AsyncFd owns a clone of the Arc, so the descriptor stays open for as
    // long as it is registered.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            Fd(dev.clone()),
            tokio::io::Interest::READABLE,
        )
    }?;
    // the writer task and its channel, when the reader hands off
    let writer = handoff.then(|| {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<[u8; PLOCK_INFO_SIZE]>();
        let out = dev.clone();
        let task = tokio::spawn(async move {
            let mut written = 0u64;
            while let Some(reply) = rx.recv().await {
                (&*out).write_all(&reply)?;
                written += 1;
            }
            Ok::<u64, std::io::Error>(written)
        });
        (tx, task)
    });
    let mut buf = [0u8; PLOCK_INFO_SIZE];
    let mut answered = 0u64;
    loop {
        let mut ready = fd.readable().await?;
        loop {
            let n = match (&*dev).read(&mut buf) {
                Ok(0) => {
                    let Some((tx, task)) = writer else {
                        return Ok(answered);
                    };
                    // the channel closes: the writer ends once it has written the rest
                    drop(tx);
                    let written = task.await.map_err(std::io::Error::other)??;
                    return Ok(answered + written);
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    ready.clear_ready();
                    break;
                }
                Err(e) => return Err(e),
            };
            let Some(reply) = answer(&buf[..n]) else {
                continue;
            };
            match &writer {
                Some((tx, _)) => tx.send(reply).map_err(std::io::Error::other)?,
                None => {
                    (&*dev).write_all(&reply)?;
                    answered += 1;
                }
            }
        }
    }
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
        let waiting = |op| dlm_tests::closed_loop::Step {
            wait: true,
            ..step(op, 9)
        };
        let mut lock = dlm_tests::closed_loop::request(3, 77, waiting(PlockOp::LOCK));
        lock.rv = -11;
        let reply = PlockInfo::decode(&answer(&lock.encode()).expect("answered")).expect("decodes");
        assert_eq!(reply, PlockInfo { rv: 0, ..lock });
        let mut close = dlm_tests::closed_loop::request(3, 77, waiting(PlockOp::UNLOCK));
        close.flags = PlockFlags(PlockFlags::CLOSE);
        assert_eq!(answer(&close.encode()), None);
        assert_eq!(answer(&[0u8; 10]), None, "not a record");
    }

    fn step(op: PlockOp, number: u64) -> dlm_tests::closed_loop::Step {
        dlm_tests::closed_loop::Step {
            op,
            number,
            start: 0,
            end: 0,
            wait: false,
        }
    }

    /// The answerer's end of a SEQPACKET pair stands for the device: a read says EAGAIN
    /// when nothing waits and 0 once the other end is closed, as the fake kernel's does.
    /// Sends `requests`, reads `replies` replies, closes the device and returns the replies
    /// and the answerer's count.
    fn exchange(how: How, requests: &[PlockInfo], replies: usize) -> (Vec<PlockInfo>, u64) {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        let (dev, driver) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::empty(),
        )
        .expect("socketpair");
        let dev = std::fs::File::from(dev);
        let flags = nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&dev, nix::fcntl::FcntlArg::F_SETFL(flags)).expect("nonblocking");
        let (done, served) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(serve(dev, how)));
        let mut driver = std::os::unix::net::UnixStream::from(driver);
        let wait = std::time::Duration::from_secs(10);
        driver.set_read_timeout(Some(wait)).expect("timeout");
        for r in requests {
            driver.write_all(&r.encode()).expect("request");
        }
        let mut got = Vec::new();
        for _ in 0..replies {
            let mut buf = [0u8; PLOCK_INFO_SIZE];
            let n = driver.read(&mut buf).expect("reply");
            got.push(PlockInfo::decode(&buf[..n]).expect("decodes"));
        }
        drop(driver);
        let answered = served.recv_timeout(wait).expect("ended").expect("served");
        (got, answered)
    }

    #[test]
    fn each_way_answers_every_request_but_a_close_and_ends_with_the_device() {
        let lock = dlm_tests::closed_loop::request(3, 77, step(PlockOp::LOCK, 1));
        let mut close = dlm_tests::closed_loop::request(3, 77, step(PlockOp::UNLOCK, 1));
        close.flags = PlockFlags(PlockFlags::CLOSE);
        let mut unlock = dlm_tests::closed_loop::request(3, 78, step(PlockOp::UNLOCK, 2));
        unlock.rv = -2;
        let ways = [
            How::Poll,
            How::Tokio,
            How::TokioHandoff,
            How::PollEngine,
            How::PollPages(3),
            How::PollCalls(calls::MAX),
        ];
        for how in ways {
            let (replies, answered) = exchange(how, &[lock, close, unlock], 2);
            // the engine's replies name this node, as the daemon's do
            let nodeid = if how == How::PollEngine { 1 } else { 0 };
            let expected = [lock, unlock].map(|r| PlockInfo { rv: 0, nodeid, ..r });
            assert_eq!(replies, expected, "{how:?}: in order, the close unanswered");
            assert_eq!(answered, 2, "{how:?}");
        }
    }

    #[test]
    fn ways_parse_with_their_counts() {
        assert_eq!(How::parse(None), Some(How::Poll));
        assert_eq!(How::parse(Some("poll-pages:64")), Some(How::PollPages(64)));
        assert_eq!(
            How::parse(Some("poll-calls:256")),
            Some(How::PollCalls(256))
        );
        assert_eq!(
            How::parse(Some("poll-calls:257")),
            None,
            "only 256 call sites"
        );
        assert_eq!(How::parse(Some("poll-pages:x")), None);
        assert_eq!(How::parse(Some("poll-engine:3")), None);
        assert_eq!(How::parse(Some("select")), None);
    }

    #[test]
    fn calls_make_as_many_calls_as_asked() {
        // each leaf rotates once and xors its index: n calls are n steps of that, in order
        for n in 0..=calls::MAX {
            let expected = (0..n as u64).fold(0x5eed_u64, |x, i| x.rotate_left(1) ^ i);
            assert_eq!(calls::make(n, 0x5eed), expected, "{n} calls");
        }
        assert_ne!(calls::make(3, 0x5eed), calls::make(4, 0x5eed));
    }

    #[test]
    fn the_engine_refuses_a_conflict_that_granting_lets_through() {
        let first = dlm_tests::closed_loop::request(3, 80, step(PlockOp::LOCK, 5));
        let second = dlm_tests::closed_loop::request(3, 81, step(PlockOp::LOCK, 5));
        let (engine, _) = exchange(How::PollEngine, &[first, second], 2);
        assert_eq!(
            engine.iter().map(|r| r.rv).collect::<Vec<_>>(),
            [0, -dlm_proto::errno::EAGAIN]
        );
        let (granted, _) = exchange(How::Poll, &[first, second], 2);
        assert_eq!(granted.iter().map(|r| r.rv).collect::<Vec<_>>(), [0, 0]);
    }
}
