//! `flood N`: what a hostile local user can do to the daemon's listeners. Opens N
//! connections to each of the main socket, the query socket and the metrics endpoint
//! (127.0.0.1:9465) of the network namespace it runs in, sends nothing, and holds every
//! one open until its standard input closes. Prints `opened <main> <query> <metrics>` once
//! all attempts are made. Run it as an unprivileged user (setpriv) with a descriptor limit
//! above 3N; a connection the daemon closes still counts as made.

use std::io::{BufRead, Write};
use std::net::TcpStream;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::process::ExitCode;
use std::time::Duration;

use dlm_proto::query::{MAIN_SOCK_NAME, QUERY_SOCK_NAME};

/// Up to `n` connections to an abstract socket; how many were made.
fn unix(name: &[u8], n: usize, held: &mut Vec<UnixStream>) -> usize {
    let Ok(addr) = SocketAddr::from_abstract_name(name) else {
        return 0;
    };
    (0..n)
        .filter(|_| {
            UnixStream::connect_addr(&addr)
                .map(|s| held.push(s))
                .is_ok()
        })
        .count()
}

fn tcp(n: usize, held: &mut Vec<TcpStream>) -> usize {
    let addr = ([127, 0, 0, 1], 9465).into();
    (0..n)
        .filter(|_| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(1))
                .map(|s| held.push(s))
                .is_ok()
        })
        .count()
}

fn main() -> ExitCode {
    let Some(n) = std::env::args()
        .nth(1)
        .and_then(|a| a.parse::<usize>().ok())
    else {
        eprintln!("usage: flood N");
        return ExitCode::from(2);
    };
    // a daemon that stops accepting must fail the test, not hang it: a blocked connect
    // ends the flood after a minute and a half
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(90));
        eprintln!("flood: gave up");
        #[allow(clippy::exit)]
        std::process::exit(3);
    });
    let (mut socks, mut streams) = (Vec::new(), Vec::new());
    let main = unix(MAIN_SOCK_NAME, n, &mut socks);
    let query = unix(QUERY_SOCK_NAME, n, &mut socks);
    let metrics = tcp(n, &mut streams);
    println!("opened {main} {query} {metrics}");
    let _ = std::io::stdout().flush();
    // hold until told to stop
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    drop((socks, streams));
    ExitCode::SUCCESS
}
