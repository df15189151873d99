//! The Prometheus endpoint: `GET /metrics` over plain HTTP/1.x, one request per
//! connection, on the address of `--metrics` (default 127.0.0.1:9465). Lockspace gauges
//! are read from the lockspace tasks at scrape time.

use std::time::Duration;

use super::admission::{Acceptor, Gate, Permit, UNKNOWN_UID};
use super::query::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Accepts forever; each admitted connection gets its own task. A TCP peer's uid is not
/// known: every connection counts as an unprivileged user's (`admission`).
pub(crate) async fn serve(listener: TcpListener, gate: Gate, registry: Registry) {
    let mut acceptor = Acceptor::new("metrics", gate);
    loop {
        let ((stream, _), permit) = acceptor.next(|| listener.accept(), |_| UNKNOWN_UID).await;
        let reg = registry.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(10), connection(stream, permit, reg))
                .await;
        });
    }
}

/// Sets the lockspace gauges from each lockspace task's report.
async fn refresh(reg: &Registry) {
    let m = crate::metrics::get();
    let as_i64 = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
    for r in super::query::reports(reg, true).await {
        let name = r.info.name.to_str_lossy();
        let n = [name.as_ref()];
        m.locks.with_label_values(&n).set(as_i64(r.locks));
        m.own_locks.with_label_values(&n).set(as_i64(r.our_locks));
        m.locks_max.with_label_values(&n).set(as_i64(r.locks_max));
        m.waiters.with_label_values(&n).set(as_i64(r.waiters));
        m.resources.with_label_values(&n).set(as_i64(r.resources));
        m.send_queue.with_label_values(&n).set(as_i64(r.send_queue));
        let age_ms = r
            .oldest_waiter_since_ms
            .map_or(0, |t| crate::clock::monotonic_ms().saturating_sub(t));
        #[allow(clippy::cast_precision_loss)] // milliseconds, far below 2^52
        m.oldest_waiter
            .with_label_values(&n)
            .set(age_ms as f64 / 1000.0);
        m.members.with_label_values(&n).set(as_i64(r.members.len()));
        m.owners_in_cycle
            .with_label_values(&n)
            .set(as_i64(r.owners_in_cycle));
        m.change_seq
            .with_label_values(&n)
            .set(i64::from(r.info.cg_prev.seq));
        let next = &r.info.cg_next;
        let now = if next.seq == 0 { "" } else { next.wait_word() };
        for c in crate::metrics::CONDITIONS {
            m.waiting
                .with_label_values(&[name.as_ref(), c])
                .set(i64::from(c == now));
        }
    }
}

/// Reads the request head, at most 8 KiB.
async fn read_head(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && !req.windows(2).any(|w| w == b"\n\n") {
        let n = s.read(&mut buf).await?;
        if n == 0 || req.len() > 8192 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    Ok(req)
}

async fn connection(mut s: TcpStream, permit: Permit, reg: Registry) -> std::io::Result<()> {
    // a peer that sends no request in time is closed (its place goes to the next)
    let Ok(req) = tokio::time::timeout(permit.header_timeout(), read_head(&mut s)).await else {
        return Ok(());
    };
    let req = req?;
    let line = req.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (words.next(), words.next());
    let (status, body): (&str, Vec<u8>) = match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => {
            refresh(&reg).await;
            ("200 OK", crate::metrics::get().encode())
        }
        (Some(b"GET"), Some(_)) => ("404 Not Found", b"try /metrics\n".to_vec()),
        _ => ("400 Bad Request", b"bad request\n".to_vec()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(&body).await?;
    s.shutdown().await
}
