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

/// Records per system call at most.
pub const PORT_BATCH: usize = 64;
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
        let lens = loop {
            match self.recv_many(&mut bufs) {
                Ok(lens) => break lens,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let ms = u16::try_from(limit.as_millis()).unwrap_or(u16::MAX);
                    if !crate::fake_kernel::readable(&self.0, ms) {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e),
            }
        };
        for (buf, len) in bufs.iter().zip(lens) {
            let info = PlockInfo::decode(&buf[..len.min(ROOM)])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            out.push(info);
        }
        Ok(())
    }

    /// Sends every record of `infos`, in order (as many system calls as it takes).
    pub fn send(&self, infos: &[PlockInfo]) -> io::Result<()> {
        for chunk in infos.chunks(PORT_BATCH) {
            let records: Vec<[u8; PLOCK_INFO_SIZE]> = chunk.iter().map(PlockInfo::encode).collect();
            let mut sent = 0;
            while sent < records.len() {
                match self.send_many(&records[sent..])? {
                    0 => return Err(io::ErrorKind::WriteZero.into()),
                    n => sent += n,
                }
            }
        }
        Ok(())
    }

    /// `recvmmsg` without waiting: each datagram's length, in order.
    fn recv_many(&self, bufs: &mut [[u8; ROOM]; PORT_BATCH]) -> io::Result<Vec<usize>> {
        // SAFETY: all-zero iovecs and mmsghdrs are valid values (null pointers, no length).
        let mut iovs: [libc::iovec; PORT_BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; PORT_BATCH] = unsafe { std::mem::zeroed() };
        for ((iov, hdr), buf) in iovs.iter_mut().zip(hdrs.iter_mut()).zip(bufs.iter_mut()) {
            iov.iov_base = buf.as_mut_ptr().cast();
            iov.iov_len = ROOM;
            hdr.msg_hdr.msg_iov = std::ptr::from_mut(iov);
            hdr.msg_hdr.msg_iovlen = 1;
        }
        let vlen = libc::c_uint::try_from(PORT_BATCH).unwrap_or(1);
        // SAFETY: each header points at one iovec of a buffer of ROOM bytes, all borrowed
        // mutably for this call and outliving it.
        let r = unsafe {
            libc::recvmmsg(
                self.0.as_raw_fd(),
                hdrs.as_mut_ptr(),
                vlen,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let got = usize::try_from(r).map_err(|_| io::Error::last_os_error())?;
        Ok(hdrs[..got].iter().map(|h| h.msg_len as usize).collect())
    }

    /// `sendmmsg` of `records` (at most [`PORT_BATCH`]), waiting for room: how many went.
    fn send_many(&self, records: &[[u8; PLOCK_INFO_SIZE]]) -> io::Result<usize> {
        let n = records.len().min(PORT_BATCH);
        // SAFETY: all-zero iovecs and mmsghdrs are valid values (null pointers, no length).
        let mut iovs: [libc::iovec; PORT_BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; PORT_BATCH] = unsafe { std::mem::zeroed() };
        for ((iov, hdr), rec) in iovs.iter_mut().zip(hdrs.iter_mut()).zip(records) {
            iov.iov_base = rec.as_ptr().cast_mut().cast();
            iov.iov_len = PLOCK_INFO_SIZE;
            hdr.msg_hdr.msg_iov = std::ptr::from_mut(iov);
            hdr.msg_hdr.msg_iovlen = 1;
        }
        let vlen = libc::c_uint::try_from(n).unwrap_or(0);
        // SAFETY: the first n headers each point at one iovec of a 64-byte record that
        // `records` lends for this call (the kernel only reads it); iovs and hdrs outlive it.
        let r = unsafe {
            libc::sendmmsg(
                self.0.as_raw_fd(),
                hdrs.as_mut_ptr(),
                vlen,
                libc::MSG_NOSIGNAL,
            )
        };
        usize::try_from(r).map_err(|_| io::Error::last_os_error())
    }
}
