//! The fake kernel's plock device held by a bench driver: many records per system call.
//!
//! [`crate::FakeKernel::send_plock`] and `recv_plock` take the connection's lock, duplicate
//! its descriptor and poll for every record: five system calls per request, which made the
//! driver, not the daemon, the bottleneck of the fastest rows (issue 14 wants a driver
//! that never is). A port keeps one descriptor and moves up to [`PORT_BATCH`] records per
//! `recvmmsg` / `sendmmsg`, as the daemon does on its side.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use dlm_proto::kernel::{PLOCK_INFO_SIZE, PlockInfo};

/// Records per system call at most: the benches' 16 processes have at most 16 replies
/// outstanding, and each call clears this many headers and buffers (a reply's next request
/// is sent alone: 64 made every request clear ~9 KiB).
pub const PORT_BATCH: usize = 16;
/// Room for a record: a longer one shows as longer than 64 bytes and fails to decode.
const ROOM: usize = 2 * PLOCK_INFO_SIZE;

/// The plock device's connection, for one driver thread.
#[derive(Debug)]
pub struct PlockPort(pub(crate) OwnedFd);

impl PlockPort {
    /// Into `out` (cleared first), the replies the daemon wrote, up to [`PORT_BATCH`]:
    /// waits up to `limit` for the first, then takes what is there. `out` is empty if none
    /// came; a record that does not decode is an error.
    pub fn recv(&self, out: &mut Vec<PlockInfo>, limit: Duration) -> io::Result<()> {
        out.clear();
        let mut bufs = [[0u8; ROOM]; PORT_BATCH];
        let mut lens = [0usize; PORT_BATCH];
        let got = loop {
            let fd = self.0.as_raw_fd();
            let room = bufs.iter_mut().map(|b| (b.as_mut_ptr(), ROOM));
            // SAFETY: `mmsg` hands headers that each point at one iovec of a buffer of ROOM
            // bytes, borrowed mutably for this call and outliving it.
            let r = mmsg(room, &mut lens, |h, n| unsafe {
                libc::recvmmsg(fd, h, n, libc::MSG_DONTWAIT, std::ptr::null_mut())
            });
            match r {
                Ok(got) => break got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let ms = u16::try_from(limit.as_millis()).unwrap_or(u16::MAX);
                    if !crate::fake_kernel::readable(&self.0, ms) {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e),
            }
        };
        for (buf, &len) in bufs.iter().zip(&lens[..got]) {
            let info = PlockInfo::decode(&buf[..len.min(ROOM)])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            out.push(info);
        }
        Ok(())
    }

    /// Sends every record of `infos`, in order (as many system calls as it takes, waiting
    /// for room).
    pub fn send(&self, infos: &[PlockInfo]) -> io::Result<()> {
        let mut records = [[0u8; PLOCK_INFO_SIZE]; PORT_BATCH];
        let mut lens = [0usize; PORT_BATCH];
        for chunk in infos.chunks(PORT_BATCH) {
            for (r, info) in records.iter_mut().zip(chunk) {
                *r = info.encode();
            }
            let mut sent = 0;
            while sent < chunk.len() {
                let fd = self.0.as_raw_fd();
                // sendmmsg only reads through these pointers
                let recs = records[sent..chunk.len()]
                    .iter()
                    .map(|r| (r.as_ptr().cast_mut(), PLOCK_INFO_SIZE));
                // SAFETY: `mmsg` hands headers that each point at one iovec of a 64-byte
                // record lent for this call (the kernel only reads it) and outliving it.
                let n = mmsg(recs, &mut lens, |h, n| unsafe {
                    libc::sendmmsg(fd, h, n, libc::MSG_NOSIGNAL)
                })?;
                match n {
                    0 => return Err(io::ErrorKind::WriteZero.into()),
                    n => sent += n,
                }
            }
        }
        Ok(())
    }
}

/// `recvmmsg` / `sendmmsg` through `call`, given headers of one iovec each over `bufs` (at
/// most [`PORT_BATCH`]) and their count: how many datagrams went, their lengths into `lens`.
fn mmsg(
    bufs: impl Iterator<Item = (*mut u8, usize)>,
    lens: &mut [usize; PORT_BATCH],
    call: impl FnOnce(*mut libc::mmsghdr, libc::c_uint) -> libc::c_int,
) -> io::Result<usize> {
    // SAFETY: all-zero iovecs and mmsghdrs are valid values (null pointers, no length).
    let mut iovs: [libc::iovec; PORT_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut hdrs: [libc::mmsghdr; PORT_BATCH] = unsafe { std::mem::zeroed() };
    let mut n: libc::c_uint = 0;
    for ((iov, hdr), (base, len)) in iovs.iter_mut().zip(hdrs.iter_mut()).zip(bufs) {
        iov.iov_base = base.cast();
        iov.iov_len = len;
        hdr.msg_hdr.msg_iov = std::ptr::from_mut(iov);
        hdr.msg_hdr.msg_iovlen = 1;
        n += 1;
    }
    let got =
        usize::try_from(call(hdrs.as_mut_ptr(), n)).map_err(|_| io::Error::last_os_error())?;
    for (len, h) in lens.iter_mut().zip(&hdrs[..got]) {
        *len = h.msg_len as usize;
    }
    Ok(got)
}
