//! The real kernel: the paths under `/`, attributes opened as the C daemon opens them,
//! character devices and the uevent netlink group.

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use nix::sys::socket::{
    AddressFamily, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, setsockopt, socket, sockopt,
};

use super::{Kernel, MiscDevice, SeamError, UeventSource};

/// The kernel the daemon runs on (`--kernel-root /`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RealKernel;

/// The uevent socket's receive buffer: room for a burst (`udevadm trigger`) while the main
/// task is busy, as udev takes; past it the kernel drops events and says ENOBUFS
/// ([`super::UeventLoss::Overrun`]).
const UEVENT_RCVBUF: usize = 8 << 20;

impl Kernel for RealKernel {
    fn path(&self, rel: &str) -> PathBuf {
        Path::new("/").join(rel)
    }

    /// configfs creates a directory's attributes itself: never create, never append.
    fn write_attr(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        OpenOptions::new().write(true).open(path)?.write_all(bytes)
    }

    /// configfs removes a directory's attributes with it.
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir(path)
    }

    fn open_device(&self, path: &Path, write: bool) -> io::Result<MiscDevice> {
        let f = OpenOptions::new().read(true).write(write).open(path)?;
        Ok(MiscDevice {
            fd: f.into(),
            socket: false,
        })
    }

    fn open_uevents(&self) -> Result<UeventSource, SeamError> {
        let err = |e: nix::Error| SeamError::Open {
            path: "netlink uevent".into(),
            source: e.into(),
        };
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkKObjectUEvent,
        )
        .map_err(err)?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(std::process::id(), 1)).map_err(err)?;
        if let Err(e) = setsockopt(&fd, sockopt::RcvBufForce, &UEVENT_RCVBUF)
            .or_else(|_| setsockopt(&fd, sockopt::RcvBuf, &UEVENT_RCVBUF))
        {
            tracing::warn!("uevent socket: receive buffer: {e}");
        }
        Ok(UeventSource { fd })
    }

    fn syslog_by_default(&self) -> bool {
        true
    }
}
