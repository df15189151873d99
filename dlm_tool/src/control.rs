//! `dlm_tool join` / `leave`: the lockspace create and remove requests libdlm writes to the
//! kernel's `dlm-control` device (`create_lockspace_v6`, `release_lockspace_v6`).
//!
//! Under `--kernel-root DIR` the device may be the project's fake kernel: a
//! `SOCK_SEQPACKET` socket where each packet is one write and the fake answers each with a
//! 4-byte packet carrying the write's return value; a lockspace's device
//! `dev/misc/dlm_<name>` is then a regular file holding its minor.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use dlm_proto::kernel::ControlRequest;

/// Writes `req` to `ROOT/dev/misc/dlm-control`; the write's return value (a create's new
/// minor, 0, or -errno).
pub(crate) fn write_request(root: &Path, req: &ControlRequest) -> io::Result<i32> {
    let path = root.join("dev/misc/dlm-control");
    let (buf, len) = req.encode();
    let kind = fs::metadata(&path)?.file_type();
    if kind.is_char_device() {
        let mut f = fs::OpenOptions::new().read(true).write(true).open(&path)?;
        // the kernel's device_write returns the new lockspace's minor as the byte count
        return Ok(match f.write(&buf[..len]) {
            Ok(n) => i32::try_from(n).unwrap_or(i32::MAX),
            Err(e) => -e.raw_os_error().unwrap_or(5),
        });
    }
    if !kind.is_socket() {
        return Err(io::Error::other(format!(
            "{} is neither the device nor a fake kernel's socket",
            path.display()
        )));
    }
    let s = seqpacket(&path)?;
    let mut s = fs::File::from(s);
    s.write_all(&buf[..len])?;
    let mut rv = [0u8; 4];
    s.read_exact(&mut rv)?;
    Ok(i32::from_ne_bytes(rv))
}

/// The minor of `ROOT/dev/misc/dlm_<name>` (`dlm_open_lockspace`).
pub(crate) fn lockspace_minor(root: &Path, name: &str) -> io::Result<u32> {
    use std::os::unix::fs::MetadataExt;
    let path = root.join("dev/misc").join(format!("dlm_{name}"));
    let m = fs::metadata(&path)?;
    if m.file_type().is_char_device() {
        // minor(): the low 8 bits and bits 20..
        let rdev = m.rdev();
        let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
        return u32::try_from(minor).map_err(io::Error::other);
    }
    fs::read_to_string(&path)?
        .trim()
        .parse()
        .map_err(io::Error::other)
}

/// A connected `SOCK_SEQPACKET` Unix socket (std has none).
fn seqpacket(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let p = path.as_os_str().as_bytes();
    // SAFETY: an all-zero sockaddr_un is a valid value of the type.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if p.len() >= addr.sun_path.len() {
        return Err(io::Error::other("socket path too long"));
    }
    addr.sun_family = libc::sa_family_t::try_from(libc::AF_UNIX).map_err(io::Error::other)?;
    for (d, s) in addr.sun_path.iter_mut().zip(p) {
        *d = libc::c_char::from_ne_bytes([*s]);
    }
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor nothing else owns.
    let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let len =
        libc::socklen_t::try_from(size_of::<libc::sockaddr_un>()).map_err(io::Error::other)?;
    // SAFETY: addr is a valid sockaddr_un of that length; fd is open.
    let rv = unsafe { libc::connect(fd, std::ptr::from_ref(&addr).cast(), len) };
    if rv < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(owned)
}
