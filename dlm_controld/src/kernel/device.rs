//! What the seam hands out: a misc device (one record per read or write) and the uevent
//! source, and what a failed uevent read means.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::sys::socket::{MsgFlags, recv, send};

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

    /// Reads one record if one is queued (`WouldBlock` otherwise). The plock device never
    /// blocks on read (it returns EAGAIN when empty); the fake kernel's socket is asked not to.
    pub fn try_read_record(&self, buf: &mut [u8]) -> io::Result<usize> {
        if self.socket {
            Ok(recv(self.fd.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT)?)
        } else {
            Ok(nix::unistd::read(&self.fd, buf)?)
        }
    }

    /// Writes one record.
    pub fn write_record(&self, bytes: &[u8]) -> io::Result<()> {
        let n = if self.socket {
            send(self.fd.as_raw_fd(), bytes, MsgFlags::MSG_NOSIGNAL)?
        } else {
            nix::unistd::write(&self.fd, bytes)?
        };
        if n == bytes.len() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short write to a misc device",
            ))
        }
    }

    /// Whether this is the fake kernel's socket.
    pub fn is_socket(&self) -> bool {
        self.socket
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
}
