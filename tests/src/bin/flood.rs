//! `flood N`: what a hostile local user can do to the daemon's listeners. Opens N
//! connections to each of the main socket, the query socket and the metrics endpoint
//! (127.0.0.1:9465) of the network namespace it runs in, sends nothing, and holds every
//! one open until its standard input closes. Prints `opened <main> <query> <metrics>` once
//! all attempts are made. Run it as an unprivileged user (setpriv) with a descriptor limit
//! above 3N; a connection the daemon closes still counts as made.

use std::io::{BufRead, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::Duration;

use dlm_proto::query::{MAIN_SOCK_NAME, QUERY_SOCK_NAME};

/// One connection to an abstract socket, without blocking: a daemon that stopped
/// accepting (its listen queue full) is retried for about 20 ms, then given up on.
fn connect_abstract(name: &[u8]) -> Option<OwnedFd> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket};
    let addr = UnixAddr::new_abstract(name).ok()?;
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .ok()?;
    for _ in 0..20 {
        match connect(fd.as_raw_fd(), &addr) {
            Ok(()) => return Some(fd),
            Err(nix::errno::Errno::EAGAIN) => std::thread::sleep(Duration::from_millis(1)),
            Err(_) => return None,
        }
    }
    None
}

/// Up to `n` connections made by `connect`, held in `held`; how many were made. Gives up
/// after 50 failures in a row (a daemon that stopped accepting).
fn flood<T>(n: usize, held: &mut Vec<T>, mut connect: impl FnMut() -> Option<T>) -> usize {
    let (mut made, mut failed) = (0, 0);
    for _ in 0..n {
        match connect() {
            Some(c) => {
                held.push(c);
                made += 1;
                failed = 0;
            }
            None => failed += 1,
        }
        if failed == 50 {
            break;
        }
    }
    made
}

fn main() -> ExitCode {
    let Some(n) = std::env::args()
        .nth(1)
        .and_then(|a| a.parse::<usize>().ok())
    else {
        eprintln!("usage: flood N");
        return ExitCode::from(2);
    };
    // a daemon that stops accepting must fail the test, not hang it: the flood ends by
    // itself after a minute and a half
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(90));
        eprintln!("flood: gave up");
        #[allow(clippy::exit)]
        std::process::exit(3);
    });
    let (mut socks, mut streams) = (Vec::new(), Vec::new());
    let main = flood(n, &mut socks, || connect_abstract(MAIN_SOCK_NAME));
    let query = flood(n, &mut socks, || connect_abstract(QUERY_SOCK_NAME));
    let addr = ([127, 0, 0, 1], 9465).into();
    let metrics = flood(n, &mut streams, || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()
    });
    println!("opened {main} {query} {metrics}");
    let _ = std::io::stdout().flush();
    // hold until told to stop
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    drop((socks, streams));
    ExitCode::SUCCESS
}
