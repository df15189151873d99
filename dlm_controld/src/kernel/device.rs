//! What the seam hands out: a misc device (one record per read or write, or a batch of
//! them per system call) and the uevent source, and what a failed uevent read means.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use dlm_proto::kernel::PLOCK_INFO_SIZE;
use nix::sys::socket::{MsgFlags, recv};

/// One record as written to the plock device.
pub type Record = [u8; PLOCK_INFO_SIZE];

/// Room for one record in a batch read: the plock device's are 64 bytes; a longer datagram
/// of the fake kernel still shows as longer than that (and the decoder refuses it).
const RECORD_ROOM: usize = 2 * PLOCK_INFO_SIZE;
/// Records read by one system call at most.
pub const READ_AT_ONCE: usize = 16;
/// Records written by one system call at most on the fake kernel's socket: as many as a
/// read ([`MiscDevice::records_per_call`] says one number for both).
const WRITE_AT_ONCE: usize = READ_AT_ONCE;
/// Records one `readv` or `writev` of a character device moves at most: the kernel copies
/// an iovec array of up to `UIO_FASTIOV` (8) entries onto its stack, and allocates and
/// frees a longer one at every call.
const DEVICE_AT_ONCE: usize = 8;

/// Records read from a misc device by one call of [`MiscDevice::try_read_records`].
#[derive(Debug)]
pub struct Records {
    bufs: [[u8; RECORD_ROOM]; READ_AT_ONCE],
    lens: [usize; READ_AT_ONCE],
    len: usize,
    room: usize,
}

impl Default for Records {
    fn default() -> Self {
        Self {
            bufs: [[0; RECORD_ROOM]; READ_AT_ONCE],
            lens: [0; READ_AT_ONCE],
            len: 0,
            room: READ_AT_ONCE,
        }
    }
}

impl Records {
    /// The next read takes at most `n` records (at most [`READ_AT_ONCE`], at least one).
    pub fn limit(&mut self, n: usize) {
        self.room = n.clamp(1, READ_AT_ONCE);
    }

    fn room(&self) -> usize {
        self.room
    }

    /// The records of the last read, each as it came (a well-formed one is 64 bytes).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.bufs[..self.len]
            .iter()
            .zip(&self.lens)
            .map(|(b, &n)| &b[..n.min(RECORD_ROOM)])
    }
}

/// The lengths of the records a `readv` of `bytes` filled, 64 bytes each (the last one
/// shorter only if the kernel ever wrote less); their count.
fn split_read(bytes: usize, lens: &mut [usize]) -> usize {
    let n = bytes.div_ceil(PLOCK_INFO_SIZE).min(lens.len());
    for (i, len) in lens[..n].iter_mut().enumerate() {
        *len = (bytes - i * PLOCK_INFO_SIZE).min(PLOCK_INFO_SIZE);
    }
    n
}

/// `recvmmsg` without waiting: a datagram into each buffer; their lengths into `lens`.
fn recv_many(
    fd: std::os::fd::RawFd,
    bufs: &mut [[u8; RECORD_ROOM]],
    lens: &mut [usize],
) -> io::Result<usize> {
    let mut iovs = [MaybeUninit::<libc::iovec>::uninit(); READ_AT_ONCE];
    let mut hdrs = [MaybeUninit::<libc::mmsghdr>::uninit(); READ_AT_ONCE];
    let bufs = bufs.iter_mut().map(|b| (b.as_mut_ptr(), RECORD_ROOM));
    let n = headers(&mut iovs, &mut hdrs, bufs.take(lens.len()));
    let vlen = libc::c_uint::try_from(n).unwrap_or(0);
    // SAFETY: the first `vlen` headers are initialized, each pointing at one iovec of a
    // buffer of RECORD_ROOM bytes that `bufs` lends mutably for this call; iovs and hdrs
    // outlive it.
    let r = unsafe {
        libc::recvmmsg(
            fd,
            hdrs.as_mut_ptr().cast(),
            vlen,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    let got = usize::try_from(r).map_err(|_| io::Error::last_os_error())?;
    for (len, h) in lens.iter_mut().zip(&hdrs[..n]).take(got) {
        // SAFETY: one of the first n headers, initialized by `headers`.
        *len = unsafe { h.assume_init_ref() }.msg_len as usize;
    }
    Ok(got)
}

/// `sendmmsg`: a datagram of each record; how many were sent.
fn send_many(fd: std::os::fd::RawFd, records: &[Record]) -> io::Result<usize> {
    let mut iovs = [MaybeUninit::<libc::iovec>::uninit(); WRITE_AT_ONCE];
    let mut hdrs = [MaybeUninit::<libc::mmsghdr>::uninit(); WRITE_AT_ONCE];
    // sendmmsg only reads through these pointers
    let bufs = records
        .iter()
        .map(|r| (r.as_ptr().cast_mut(), PLOCK_INFO_SIZE));
    let n = headers(&mut iovs, &mut hdrs, bufs);
    let vlen = libc::c_uint::try_from(n).unwrap_or(0);
    // SAFETY: the first n headers are initialized, each pointing at one iovec of a record of
    // 64 bytes that `records` lends for this call (the kernel only reads them); iovs and hdrs
    // outlive it.
    let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr().cast(), vlen, libc::MSG_NOSIGNAL) };
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

/// The first headers for `recvmmsg`/`sendmmsg`, one per `(buffer, length)` that fits, each
/// with one iovec of its own; how many. Only those are written: a request of one record
/// does not pay for clearing sixteen.
fn headers(
    iovs: &mut [MaybeUninit<libc::iovec>],
    hdrs: &mut [MaybeUninit<libc::mmsghdr>],
    bufs: impl Iterator<Item = (*mut u8, usize)>,
) -> usize {
    let mut n = 0;
    for ((iov, hdr), (base, len)) in iovs.iter_mut().zip(hdrs.iter_mut()).zip(bufs) {
        let iov = iov.write(libc::iovec {
            iov_base: base.cast(),
            iov_len: len,
        });
        // SAFETY: mmsghdr is plain data for which all zeroes is valid (no name, no control
        // data).
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = 1;
        hdr.write(h);
        n += 1;
    }
    n
}

/// Writes `records` (at most [`DEVICE_AT_ONCE`]) to a character device; how many were
/// written. One record is a `write`, as C's, which spares the kernel the iovec's import
/// and its loop over the buffers of a `writev`.
fn write_device(fd: &OwnedFd, records: &[Record]) -> io::Result<usize> {
    let written = if let [one] = records {
        nix::unistd::write(fd, one)
    } else {
        let mut each = records.iter();
        let iov: [io::IoSlice<'_>; DEVICE_AT_ONCE] = std::array::from_fn(|_| {
            each.next()
                .map_or_else(|| io::IoSlice::new(&[]), |r| io::IoSlice::new(r))
        });
        nix::sys::uio::writev(fd, &iov[..records.len().min(DEVICE_AT_ONCE)])
    };
    written
        .map(|bytes| bytes / PLOCK_INFO_SIZE)
        .map_err(io::Error::from)
}

/// An open misc device: one record per read() or write().
#[derive(Debug)]
pub struct MiscDevice {
    pub(super) fd: OwnedFd,
    /// The fake kernel's `SOCK_SEQPACKET` socket, not a character device.
    pub(super) socket: bool,
}

impl MiscDevice {
    /// Reads one record into `buf`; its length. 0 means the fake kernel went away.
    pub fn read_record(&self, buf: &mut [u8]) -> io::Result<usize> {
        if self.socket {
            Ok(recv(self.fd.as_raw_fd(), buf, MsgFlags::empty())?)
        } else {
            Ok(nix::unistd::read(&self.fd, buf)?)
        }
    }

    /// Records one call of [`Self::try_read_records`] or [`Self::write_records`] moves at
    /// most: 8 on a character device, 16 on the fake kernel's socket.
    pub fn records_per_call(&self) -> usize {
        if self.socket {
            READ_AT_ONCE
        } else {
            DEVICE_AT_ONCE
        }
    }

    /// Reads the records queued, up to `batch.room()` and [`Self::records_per_call`], with
    /// one system call: `readv` of 64-byte buffers on the plock device (the kernel reads one
    /// request into each, and stops at the first EAGAIN), `recvmmsg` on the fake kernel's
    /// socket. `WouldBlock` when none is queued; fewer than asked (of a room within
    /// `records_per_call`) means the device was empty after the last one; `Ok(0)` that the
    /// fake kernel went away.
    pub fn try_read_records(&self, batch: &mut Records) -> io::Result<usize> {
        let room = batch.room().min(self.records_per_call());
        let n = if self.socket {
            recv_many(
                self.fd.as_raw_fd(),
                &mut batch.bufs[..room],
                &mut batch.lens,
            )?
        } else {
            let mut bufs = batch.bufs.iter_mut();
            let mut iov: [io::IoSliceMut<'_>; READ_AT_ONCE] = std::array::from_fn(|_| {
                bufs.next().map_or_else(
                    || io::IoSliceMut::new(&mut []),
                    |b| io::IoSliceMut::new(&mut b[..PLOCK_INFO_SIZE]),
                )
            });
            let bytes = nix::sys::uio::readv(&self.fd, &mut iov[..room])?;
            split_read(bytes, &mut batch.lens)
        };
        batch.len = n;
        Ok(n)
    }

    /// Writes `records` in order, [`Self::records_per_call`] per system call at most (on
    /// the plock device a `write` of one record or a `writev` of several, on the fake
    /// kernel's socket `sendmmsg`). A record that fails is reported to `failed` and
    /// skipped; the others are still written.
    pub fn write_records(&self, records: &[Record], mut failed: impl FnMut(io::Error)) {
        let mut rest = records;
        while !rest.is_empty() {
            let chunk = &rest[..rest.len().min(self.records_per_call())];
            let done = if self.socket {
                send_many(self.fd.as_raw_fd(), chunk)
            } else {
                write_device(&self.fd, chunk)
            };
            match done {
                Ok(0) => {
                    failed(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "short write to a misc device",
                    ));
                    rest = &rest[1..];
                }
                Ok(n) => rest = &rest[n.min(rest.len())..],
                Err(e) => {
                    failed(e);
                    rest = &rest[1..];
                }
            }
        }
    }

    /// Whether this is the fake kernel's socket.
    pub fn is_socket(&self) -> bool {
        self.socket
    }

    /// One end of a `SOCK_SEQPACKET` pair as the fake kernel's plock device (tests of the
    /// device's reader).
    #[cfg(test)]
    pub(crate) fn of_socket(fd: OwnedFd) -> Self {
        Self { fd, socket: true }
    }
}

impl AsFd for MiscDevice {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Where uevents come from.
#[derive(Debug)]
pub struct UeventSource {
    pub(super) fd: OwnedFd,
}

impl UeventSource {
    /// Receives one raw uevent (the kernel's are well under 4 KiB).
    pub fn recv(&self) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; 4096];
        let n = recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        buf.truncate(n);
        Ok(buf)
    }
}

/// Room for one uevent: the kernel's are at most 2 KiB (`UEVENT_BUFFER_SIZE`).
const UEVENT_MAX: usize = 8192;

impl UeventSource {
    /// Receives one raw uevent if one is queued (`WouldBlock` otherwise); a longer one than
    /// 8 KiB is an `InvalidData` error (see [`UeventLoss::of`]), not a cut event.
    pub fn try_recv(&self) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; UEVENT_MAX];
        let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_TRUNC;
        let n = recv(self.fd.as_raw_fd(), &mut buf, flags)?;
        if n > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("uevent of {n} bytes truncated to {UEVENT_MAX}"),
            ));
        }
        buf.truncate(n);
        Ok(buf)
    }
}

/// A failed uevent read the daemon goes on from (C's `process_uevent` logs and returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UeventLoss {
    /// ENOBUFS: the socket's buffer overflowed and the kernel dropped events.
    Overrun,
    /// A datagram longer than any uevent, dropped whole.
    Truncated,
    /// EINTR.
    Interrupted,
}

impl UeventLoss {
    /// What `e` from [`UeventSource::try_recv`] means; `None` for an error that ends the
    /// daemon (the socket itself is broken).
    pub fn of(e: &io::Error) -> Option<Self> {
        match (e.kind(), e.raw_os_error()) {
            (_, Some(libc::ENOBUFS)) => Some(Self::Overrun),
            (io::ErrorKind::Interrupted, _) => Some(Self::Interrupted),
            (io::ErrorKind::InvalidData, _) => Some(Self::Truncated),
            _ => None,
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Overrun => "overrun",
            Self::Truncated => "truncated",
            Self::Interrupted => "interrupted",
        }
    }
}

impl AsFd for UeventSource {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uevent_losses_are_gone_on_from_and_a_broken_socket_is_not() {
        let os = io::Error::from_raw_os_error;
        assert_eq!(
            UeventLoss::of(&os(libc::ENOBUFS)),
            Some(UeventLoss::Overrun)
        );
        assert_eq!(
            UeventLoss::of(&os(libc::EINTR)),
            Some(UeventLoss::Interrupted)
        );
        let cut = io::Error::new(io::ErrorKind::InvalidData, "cut");
        assert_eq!(UeventLoss::of(&cut), Some(UeventLoss::Truncated));
        assert_eq!(UeventLoss::of(&os(libc::EBADF)), None);
        assert_eq!(UeventLoss::of(&os(libc::ENOTSOCK)), None);
    }

    #[test]
    fn a_readv_of_the_plock_device_is_split_into_its_records() {
        let mut lens = [0usize; READ_AT_ONCE];
        assert_eq!(split_read(0, &mut lens), 0);
        assert_eq!(split_read(192, &mut lens), 3);
        assert_eq!(lens[..3], [64, 64, 64]);
        // a kernel that ever wrote less: the last record as it came (the decoder refuses it)
        assert_eq!(split_read(70, &mut lens), 2);
        assert_eq!(lens[..2], [64, 6]);
        assert_eq!(
            split_read(64 * 40, &mut lens),
            READ_AT_ONCE,
            "never past the room"
        );
    }

    /// A pipe stands in for the plock device (a character device's `readv` reads its
    /// records into 64-byte buffers, one after the other; a pipe fills them the same way):
    /// the device on one end, a file on the other.
    fn pipe_device(device_reads: bool) -> (MiscDevice, std::fs::File) {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let (fd, other) = if device_reads { (r, w) } else { (w, r) };
        (MiscDevice { fd, socket: false }, std::fs::File::from(other))
    }

    fn numbered(n: usize) -> Vec<Record> {
        (0..n)
            .map(|i| {
                let mut r = [0u8; PLOCK_INFO_SIZE];
                r[0] = u8::try_from(i).expect("small");
                r
            })
            .collect()
    }

    #[test]
    fn a_character_device_is_read_and_written_at_most_eight_records_a_call() {
        use std::io::{Read, Write};
        let (dev, mut w) = pipe_device(true);
        assert_eq!(dev.records_per_call(), 8);
        for r in numbered(20) {
            w.write_all(&r).expect("write");
        }
        let mut batch = Records::default();
        batch.limit(READ_AT_ONCE);
        // sixteen asked, eight read: the kernel never allocates an iovec array for us
        assert_eq!(dev.try_read_records(&mut batch).expect("read"), 8);
        let firsts: Vec<u8> = batch.iter().map(|b| b[0]).collect();
        assert_eq!(firsts, (0..8).collect::<Vec<u8>>());
        assert!(batch.iter().all(|b| b.len() == PLOCK_INFO_SIZE));
        batch.limit(3);
        assert_eq!(dev.try_read_records(&mut batch).expect("read"), 3);
        assert_eq!(batch.iter().next().map(|b| b[0]), Some(8));

        // twenty replies go out whole and in order, eight to a writev (the last four too),
        // then one alone (a write)
        let (out, mut rd) = pipe_device(false);
        let mut failed = 0;
        out.write_records(&numbered(20), |_| failed += 1);
        out.write_records(&numbered(21)[20..], |_| failed += 1);
        assert_eq!(failed, 0);
        let mut got = vec![0u8; 21 * PLOCK_INFO_SIZE];
        rd.read_exact(&mut got).expect("read back");
        let firsts: Vec<u8> = got.chunks(PLOCK_INFO_SIZE).map(|c| c[0]).collect();
        assert_eq!(firsts, (0..21).collect::<Vec<u8>>());
    }
}
