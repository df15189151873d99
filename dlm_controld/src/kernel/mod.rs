//! The kernel seam: every kernel interface the daemon touches, under one root directory.
//!
//! With the root `/` these are the real interfaces: configfs under
//! `/sys/kernel/config/dlm/cluster`, sysfs under `/sys/kernel/dlm/<ls>`, the misc devices
//! `/dev/misc/{dlm_plock,dlm-monitor,dlm-control}` and the uevent netlink socket. With any
//! other root `DIR` the same paths under `DIR` are served by a fake kernel (`tests/`): each
//! misc device is a `SOCK_SEQPACKET` socket (one packet per read() or write()), and uevents
//! come from `DIR/run/dlm_controld/uevent.sock`.
//!
//! Writes: sysfs values end with a NUL, configfs values do not (daemon-spec §2.2, §2.4).
//! On a fake root attribute files are opened with `O_APPEND|O_CREAT` so that every write
//! stays visible to the fake kernel, which cannot create configfs attributes the way
//! configfs does at mkdir; on `/` they are opened exactly as the C daemon opens them.

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::{Path, PathBuf};

use dlm_proto::LockspaceName;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, UnixAddr, bind,
    connect, recv, send, socket,
};

mod verbs;
pub use verbs::ClusterAttrs;

/// A kernel interface failed; the message names the path (and the value written).
#[derive(Debug, thiserror::Error)]
pub enum SeamError {
    /// A write to configfs or sysfs.
    #[error("failed to write {value:?} to {path}: {source}")]
    Write {
        /// File.
        path: PathBuf,
        /// What was written (lossy text).
        value: String,
        /// Cause.
        source: io::Error,
    },
    /// mkdir in configfs.
    #[error("failed to mkdir {path}: {source}")]
    Mkdir {
        /// Directory.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// rmdir in configfs.
    #[error("failed to rmdir {path}: {source}")]
    Rmdir {
        /// Directory.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// Opening or connecting a device or socket.
    #[error("failed to open {path}: {source}")]
    Open {
        /// Device, socket or "netlink".
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
}

/// The root of every kernel path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoot {
    dir: PathBuf,
}

/// configfs cluster directory, relative to the root.
pub const CONFIGFS_CLUSTER: &str = "sys/kernel/config/dlm/cluster";

impl KernelRoot {
    /// `--kernel-root DIR` (default `/`).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The real kernel.
    pub fn is_real(&self) -> bool {
        self.dir == Path::new("/")
    }

    /// `DIR/rel`.
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Lockspaces the kernel has at startup (`check_uncontrolled_lockspaces`): entries of
    /// `sys/kernel/dlm` not starting with `.`, sorted.
    pub fn uncontrolled_lockspaces(&self) -> Vec<String> {
        let Ok(d) = fs::read_dir(self.path("sys/kernel/dlm")) else {
            return Vec::new();
        };
        let mut v: Vec<String> = d
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        v.sort();
        v
    }

    fn write_file(&self, path: PathBuf, bytes: &[u8]) -> Result<(), SeamError> {
        let mut opts = OpenOptions::new();
        opts.write(true);
        if !self.is_real() {
            opts.append(true).create(true);
        }
        let err = |source| SeamError::Write {
            path: path.clone(),
            value: String::from_utf8_lossy(bytes).into_owned(),
            source,
        };
        let mut f = opts.open(&path).map_err(err)?;
        f.write_all(bytes).map_err(err)
    }

    /// Writes a configfs attribute under the cluster directory: `value` bytes, no NUL.
    fn configfs_write(&self, rel: &str, value: &[u8]) -> Result<(), SeamError> {
        self.write_file(self.path(CONFIGFS_CLUSTER).join(rel), value)
    }

    /// Creates a configfs directory under the cluster directory (mode 0777 under the
    /// umask, as C); an existing one is fine. `rel` empty creates `cluster` itself.
    fn configfs_mkdir(&self, rel: &str) -> Result<(), SeamError> {
        let path = if rel.is_empty() {
            self.path(CONFIGFS_CLUSTER)
        } else {
            self.path(CONFIGFS_CLUSTER).join(rel)
        };
        match fs::DirBuilder::new().mode(0o777).create(&path) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                Err(SeamError::Mkdir { path, source: e })
            }
            _ => Ok(()),
        }
    }

    /// Removes a configfs directory. On a fake root the attribute files the daemon created
    /// go first (configfs removes its own).
    fn configfs_rmdir(&self, rel: &str) -> Result<(), SeamError> {
        let path = self.path(CONFIGFS_CLUSTER).join(rel);
        if !self.is_real() {
            if let Ok(entries) = fs::read_dir(&path) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_file()) {
                        let _ = fs::remove_file(e.path());
                    }
                }
            }
        }
        fs::remove_dir(&path).map_err(|source| SeamError::Rmdir { path, source })
    }

    /// Names of the entries of a configfs directory (for `clear_configfs`).
    fn configfs_list(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.path(CONFIGFS_CLUSTER).join(rel))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Writes a sysfs attribute of a lockspace: the decimal text plus its NUL.
    fn sysfs_write(&self, ls: &LockspaceName, attr: &str, value: &str) -> Result<(), SeamError> {
        let mut bytes = value.as_bytes().to_vec();
        bytes.push(0);
        let path = self
            .path("sys/kernel/dlm")
            .join(ls.to_str_lossy().as_ref())
            .join(attr);
        self.write_file(path, &bytes)
    }

    /// Opens a misc device (`dlm_plock`, `dlm-monitor`, `dlm-control`): a character device
    /// on the real kernel, a connected `SOCK_SEQPACKET` socket on a fake one. Close-on-exec
    /// either way (so fence agents do not inherit the monitor, unlike C).
    pub fn open_misc(&self, name: &str) -> Result<MiscDevice, SeamError> {
        let path = self.path("dev/misc").join(name);
        let err = |source| SeamError::Open {
            path: path.clone(),
            source,
        };
        let meta = fs::metadata(&path).map_err(err)?;
        if meta.file_type().is_socket() {
            let fd = seqpacket_connect(&path).map_err(err)?;
            return Ok(MiscDevice { fd, socket: true });
        }
        let f = OpenOptions::new()
            .read(true)
            .write(name != "dlm-monitor")
            .open(&path)
            .map_err(err)?;
        Ok(MiscDevice {
            fd: f.into(),
            socket: false,
        })
    }

    /// The uevent source: the kernel's netlink multicast group on `/`, the fake kernel's
    /// socket elsewhere.
    pub fn open_uevents(&self) -> Result<UeventSource, SeamError> {
        if self.is_real() {
            let err = |source| SeamError::Open {
                path: "netlink uevent".into(),
                source,
            };
            let fd = socket(
                AddressFamily::Netlink,
                SockType::Datagram,
                SockFlag::SOCK_CLOEXEC,
                SockProtocol::NetlinkKObjectUEvent,
            )
            .map_err(|e| err(e.into()))?;
            bind(fd.as_raw_fd(), &NetlinkAddr::new(std::process::id(), 1))
                .map_err(|e| err(e.into()))?;
            // room for a burst (`udevadm trigger`) while the main task is busy, as udev
            // takes; past it the kernel drops events and says ENOBUFS (UeventLoss::Overrun)
            use nix::sys::socket::{setsockopt, sockopt};
            if let Err(e) = setsockopt(&fd, sockopt::RcvBufForce, &UEVENT_RCVBUF)
                .or_else(|_| setsockopt(&fd, sockopt::RcvBuf, &UEVENT_RCVBUF))
            {
                tracing::warn!("uevent socket: receive buffer: {e}");
            }
            return Ok(UeventSource { fd });
        }
        let path = self.path("run/dlm_controld/uevent.sock");
        let fd = seqpacket_connect(&path).map_err(|source| SeamError::Open { path, source })?;
        Ok(UeventSource { fd })
    }
}

fn seqpacket_connect(path: &Path) -> io::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    connect(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    Ok(fd)
}

/// An open misc device: one record per read() or write().
#[derive(Debug)]
pub struct MiscDevice {
    fd: OwnedFd,
    socket: bool,
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
    fd: OwnedFd,
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

/// The uevent socket's receive buffer.
const UEVENT_RCVBUF: usize = 8 << 20;
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
