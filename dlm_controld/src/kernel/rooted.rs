//! A kernel under a directory other than `/`, served by the fake kernel of `tests/`: the
//! same paths under the root, misc devices and the uevent source as `SOCK_SEQPACKET`
//! sockets (one packet per read or write).

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket};

use super::{Kernel, MiscDevice, SeamError, UeventSource};

/// `--kernel-root DIR` for a `DIR` other than `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootedKernel {
    dir: PathBuf,
}

impl RootedKernel {
    /// The kernel under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }
}

impl Kernel for RootedKernel {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Opened `O_APPEND|O_CREAT`, so that every write stays visible to the fake kernel,
    /// which cannot create configfs attributes the way configfs does at mkdir.
    fn write_attr(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut f = OpenOptions::new().append(true).create(true).open(path)?;
        f.write_all(bytes)
    }

    /// The attribute files the daemon created go first (configfs removes its own).
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        if let Ok(entries) = fs::read_dir(path) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_file()) {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        fs::remove_dir(path)
    }

    fn open_device(&self, path: &Path, _write: bool) -> io::Result<MiscDevice> {
        Ok(MiscDevice {
            fd: seqpacket_connect(path)?,
            socket: true,
        })
    }

    fn open_uevents(&self) -> Result<UeventSource, SeamError> {
        let path = self.path("run/dlm_controld/uevent.sock");
        let fd = seqpacket_connect(&path).map_err(|source| SeamError::Open { path, source })?;
        Ok(UeventSource { fd })
    }

    /// Tests and the demo cluster keep their log to the file and stderr.
    fn syslog_by_default(&self) -> bool {
        false
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
