//! The other corosync services dlm_controld uses: quorum, cfg (node id, node addresses,
//! kill) and cmap (the nodelist and cluster name).

use std::collections::VecDeque;
use std::ffi::{CStr, CString};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;
use std::os::raw::{c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::CpgError;
use crate::sys;

fn check(call: &'static str, code: sys::cs_error_t) -> Result<(), CpgError> {
    match code {
        sys::CS_OK => Ok(()),
        sys::CS_ERR_TRY_AGAIN => Err(CpgError::TryAgain),
        sys::CS_ERR_LIBRARY | sys::CS_ERR_BAD_HANDLE => Err(CpgError::Gone { call, code }),
        code => Err(CpgError::Call { call, code }),
    }
}

/// A quorum change: whether the partition is quorate, its ring sequence and its nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumChange {
    /// The partition has quorum.
    pub quorate: bool,
    /// Totem ring sequence.
    pub ring_seq: u64,
    /// Nodes in the quorum view.
    pub nodes: Vec<u32>,
}

#[derive(Debug, Default)]
struct QuorumInner {
    changes: VecDeque<QuorumChange>,
}

/// The quorum service, tracking changes.
#[derive(Debug)]
pub struct Quorum {
    handle: sys::quorum_handle_t,
    inner: *mut QuorumInner,
}

// SAFETY: as for CorosyncGroup: the handle is usable from any thread and `inner` is only
// touched inside dispatch, which takes `&mut self`.
unsafe impl Send for Quorum {}

unsafe extern "C" fn quorum_cb(
    handle: sys::quorum_handle_t,
    quorate: u32,
    ring_seq: u64,
    n: u32,
    list: *mut u32,
) {
    let mut ctx: *const c_void = std::ptr::null();
    // SAFETY: called by libquorum from our dispatch with a live handle.
    if unsafe { sys::quorum_context_get(handle, &raw mut ctx) } != sys::CS_OK || ctx.is_null() {
        return;
    }
    // SAFETY: the context is our Box<QuorumInner>, alive until finalize.
    let inner = unsafe { &mut *(ctx.cast_mut().cast::<QuorumInner>()) };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let nodes = if list.is_null() || n == 0 {
            Vec::new()
        } else {
            // SAFETY: libquorum passes `n` entries.
            unsafe { std::slice::from_raw_parts(list, n as usize) }.to_vec()
        };
        inner.changes.push_back(QuorumChange {
            quorate: quorate != 0,
            ring_seq,
            nodes,
        });
    }));
}

impl Quorum {
    /// Connects and starts tracking; the current state arrives as the first change.
    pub fn new() -> Result<Self, CpgError> {
        let mut callbacks = sys::quorum_callbacks_t {
            quorum_notify_fn: Some(quorum_cb),
        };
        let mut handle = 0;
        let mut qtype = 0u32;
        // SAFETY: valid out-pointers and callbacks.
        check("quorum_initialize", unsafe {
            sys::quorum_initialize(&raw mut handle, &raw mut callbacks, &raw mut qtype)
        })?;
        let inner = Box::into_raw(Box::<QuorumInner>::default());
        let q = Self { handle, inner };
        // SAFETY: live handle; the context outlives it (freed in Drop after finalize).
        check("quorum_context_set", unsafe {
            sys::quorum_context_set(handle, inner.cast_const().cast::<c_void>())
        })?;
        // SAFETY: live handle.
        check("quorum_trackstart", unsafe {
            sys::quorum_trackstart(handle, sys::CS_TRACK_CURRENT | sys::CS_TRACK_CHANGES)
        })?;
        Ok(q)
    }

    /// Whether the local partition is quorate now.
    pub fn quorate(&self) -> Result<bool, CpgError> {
        let mut q: c_int = 0;
        // SAFETY: live handle, valid out-pointer.
        check("quorum_getquorate", unsafe {
            sys::quorum_getquorate(self.handle, &raw mut q)
        })?;
        Ok(q != 0)
    }

    /// Readiness fd (libqb's: never close it).
    pub fn as_raw_fd(&self) -> Result<RawFd, CpgError> {
        let mut fd: c_int = -1;
        // SAFETY: live handle, valid out-pointer.
        check("quorum_fd_get", unsafe {
            sys::quorum_fd_get(self.handle, &raw mut fd)
        })?;
        Ok(fd)
    }

    /// Drains pending notifications (on a thread with ≥ 2 MiB of stack).
    pub fn dispatch(&mut self) -> Result<(), CpgError> {
        crate::corosync::check_dispatch_stack("quorum_dispatch")?;
        // SAFETY: live handle; the callback only touches `inner`.
        match check("quorum_dispatch", unsafe {
            sys::quorum_dispatch(self.handle, sys::CS_DISPATCH_ALL)
        }) {
            Err(CpgError::TryAgain) => Ok(()),
            other => other,
        }
    }

    /// The next change, if any.
    pub fn poll_change(&mut self) -> Option<QuorumChange> {
        // SAFETY: inner is the live Box freed only in Drop.
        unsafe { &mut *self.inner }.changes.pop_front()
    }
}

impl Drop for Quorum {
    fn drop(&mut self) {
        // SAFETY: live handle, finalized once.
        unsafe {
            sys::quorum_finalize(self.handle);
        }
        // SAFETY: from Box::into_raw in new; no longer referenced.
        drop(unsafe { Box::from_raw(self.inner) });
    }
}

/// One address of a node as corosync reports it: the raw `sockaddr` bytes, zero padded to
/// `sockaddr_storage` (what dlm_controld writes to configfs `comms/<id>/addr`), and parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddr {
    /// 128 bytes: the sockaddr as the kernel's configfs `addr` attribute wants it.
    pub storage: [u8; 128],
    /// The same address, parsed (port 0).
    pub addr: Option<SocketAddr>,
}

fn parse_sockaddr(raw: &[u8]) -> Option<SocketAddr> {
    let family = c_int::from(u16::from_ne_bytes([*raw.first()?, *raw.get(1)?]));
    match family {
        libc::AF_INET => {
            let b: [u8; 4] = raw.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(b)), 0))
        }
        libc::AF_INET6 => {
            let b: [u8; 16] = raw.get(8..24)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(b)), 0))
        }
        _ => None,
    }
}

/// Shutdown requests received by cfg trampolines, by handle. libcfg has no context
/// pointer, so this small registry stands in for one: the lock is taken only to push or
/// take an entry, never while calling into corosync or user code, so it cannot deadlock the
/// way a lock held across callbacks does.
static SHUTDOWN_REQUESTS: std::sync::Mutex<Vec<(u64, c_int)>> = std::sync::Mutex::new(Vec::new());

unsafe extern "C" fn shutdown_cb(handle: sys::corosync_cfg_handle_t, flags: c_int) {
    let _ = catch_unwind(|| {
        if let Ok(mut q) = SHUTDOWN_REQUESTS.lock() {
            q.push((handle, flags));
        }
    });
}

/// The cfg service.
#[derive(Debug)]
pub struct Cfg {
    handle: sys::corosync_cfg_handle_t,
}

impl Cfg {
    /// Connects, without shutdown tracking.
    pub fn new() -> Result<Self, CpgError> {
        Self::init(false)
    }

    /// Connects and asks corosync to consult us before it shuts down: a request arrives
    /// through [`Cfg::dispatch`] and [`Cfg::poll_shutdown`], and the daemon answers with
    /// [`Cfg::reply_shutdown`] (dlm_controld refuses while it has lockspaces).
    pub fn with_shutdown_tracking() -> Result<Self, CpgError> {
        Self::init(true)
    }

    fn init(track: bool) -> Result<Self, CpgError> {
        let callbacks = sys::corosync_cfg_callbacks_t {
            corosync_cfg_shutdown_callback: if track { Some(shutdown_cb) } else { None },
        };
        let mut handle = 0;
        // SAFETY: valid out-pointer and callbacks.
        check("corosync_cfg_initialize", unsafe {
            sys::corosync_cfg_initialize(&raw mut handle, &raw const callbacks)
        })?;
        let cfg = Self { handle };
        if track {
            // SAFETY: live handle.
            check("corosync_cfg_trackstart", unsafe {
                sys::corosync_cfg_trackstart(handle, 0)
            })?;
        }
        Ok(cfg)
    }

    /// Readiness fd (libqb's: never close it).
    pub fn as_raw_fd(&self) -> Result<RawFd, CpgError> {
        let mut fd: c_int = -1;
        // SAFETY: live handle, valid out-pointer.
        check("corosync_cfg_fd_get", unsafe {
            sys::corosync_cfg_fd_get(self.handle, &raw mut fd)
        })?;
        Ok(fd)
    }

    /// Drains pending callbacks (on a thread with ≥ 2 MiB of stack).
    pub fn dispatch(&mut self) -> Result<(), CpgError> {
        crate::corosync::check_dispatch_stack("corosync_cfg_dispatch")?;
        // SAFETY: live handle; the callback only records the request.
        match check("corosync_cfg_dispatch", unsafe {
            sys::corosync_cfg_dispatch(self.handle, sys::CS_DISPATCH_ALL)
        }) {
            Err(CpgError::TryAgain) => Ok(()),
            other => other,
        }
    }

    /// A shutdown request for this handle, if one arrived: `true` when corosync only asks
    /// (`COROSYNC_CFG_SHUTDOWN_FLAG_REQUEST`) and waits for our answer.
    pub fn poll_shutdown(&mut self) -> Option<bool> {
        let mut q = SHUTDOWN_REQUESTS.lock().ok()?;
        let i = q.iter().position(|(h, _)| *h == self.handle)?;
        let (_, flags) = q.remove(i);
        Some(flags == sys::COROSYNC_CFG_SHUTDOWN_FLAG_REQUEST)
    }

    /// Answers a shutdown request: allow it or refuse it.
    pub fn reply_shutdown(&self, allow: bool) -> Result<(), CpgError> {
        let flag = if allow {
            sys::COROSYNC_CFG_SHUTDOWN_FLAG_YES
        } else {
            sys::COROSYNC_CFG_SHUTDOWN_FLAG_NO
        };
        // SAFETY: live handle.
        check("corosync_cfg_replyto_shutdown", unsafe {
            sys::corosync_cfg_replyto_shutdown(self.handle, flag)
        })
    }

    /// Our node id.
    pub fn local_nodeid(&self) -> Result<u32, CpgError> {
        let mut id: c_uint = 0;
        // SAFETY: live handle, valid out-pointer.
        check("corosync_cfg_local_get", unsafe {
            sys::corosync_cfg_local_get(self.handle, &raw mut id)
        })?;
        Ok(id)
    }

    /// Up to 4 addresses of `nodeid` (`MAX_NODE_ADDRESSES` in dlm_controld).
    pub fn node_addrs(&self, nodeid: u32) -> Result<Vec<NodeAddr>, CpgError> {
        let mut addrs = [sys::corosync_cfg_node_address_t {
            address_length: 0,
            address: [0; 28],
        }; 4];
        let mut n: c_int = 0;
        // SAFETY: live handle; `addrs` has room for the 4 entries we allow.
        check("corosync_cfg_get_node_addrs", unsafe {
            sys::corosync_cfg_get_node_addrs(self.handle, nodeid, 4, &raw mut n, addrs.as_mut_ptr())
        })?;
        let n = usize::try_from(n).unwrap_or(0).min(4);
        Ok(addrs[..n]
            .iter()
            .map(|a| {
                let mut storage = [0u8; 128];
                for (d, s) in storage.iter_mut().zip(a.address.iter()) {
                    *d = s.to_ne_bytes()[0];
                }
                NodeAddr {
                    addr: parse_sockaddr(&storage),
                    storage,
                }
            })
            .collect())
    }

    /// Asks corosync to kill `nodeid` (dlm_controld's stateful-merge handling).
    pub fn kill_node(&self, nodeid: u32, reason: &str) -> Result<(), CpgError> {
        let reason = CString::new(reason.replace('\0', " ")).unwrap_or_default();
        // SAFETY: live handle, NUL-terminated reason.
        check("corosync_cfg_kill_node", unsafe {
            sys::corosync_cfg_kill_node(self.handle, nodeid, reason.as_ptr())
        })
    }
}

impl Drop for Cfg {
    fn drop(&mut self) {
        // SAFETY: live handle, finalized once.
        unsafe {
            sys::corosync_cfg_finalize(self.handle);
        }
    }
}

/// The cmap service (read only).
#[derive(Debug)]
pub struct Cmap {
    handle: sys::cmap_handle_t,
}

impl Cmap {
    /// Connects.
    pub fn new() -> Result<Self, CpgError> {
        let mut handle = 0;
        // SAFETY: valid out-pointer.
        check("cmap_initialize", unsafe {
            sys::cmap_initialize(&raw mut handle)
        })?;
        Ok(Self { handle })
    }

    /// A u8 key (`quorum.two_node`, `quorum.wait_for_all`: corosync stores the quorum
    /// switches as u8, and refuses to read them as another type with
    /// CS_ERR_INVALID_PARAM); `None` if absent.
    pub fn get_u8(&self, key: &str) -> Result<Option<u8>, CpgError> {
        let Ok(k) = CString::new(key) else {
            return Ok(None);
        };
        let mut v = 0u8;
        // SAFETY: live handle, NUL-terminated key, valid out-pointer.
        match unsafe { sys::cmap_get_uint8(self.handle, k.as_ptr(), &raw mut v) } {
            sys::CS_OK => Ok(Some(v)),
            12 => Ok(None), // CS_ERR_NOT_EXIST
            code => check("cmap_get_uint8", code).map(|()| None),
        }
    }

    /// A u32 key (`nodelist.node.N.nodeid`); `None` if absent.
    pub fn get_u32(&self, key: &str) -> Result<Option<u32>, CpgError> {
        let Ok(k) = CString::new(key) else {
            return Ok(None);
        };
        let mut v = 0u32;
        // SAFETY: live handle, NUL-terminated key, valid out-pointer.
        match unsafe { sys::cmap_get_uint32(self.handle, k.as_ptr(), &raw mut v) } {
            sys::CS_OK => Ok(Some(v)),
            12 => Ok(None), // CS_ERR_NOT_EXIST
            code => check("cmap_get_uint32", code).map(|()| None),
        }
    }

    /// The configured nodes (`nodelist.node.N.nodeid` for N = 0, 1, … until one is
    /// missing), as dlm_controld reads them for startup fencing.
    pub fn nodelist(&self) -> Result<Vec<u32>, CpgError> {
        let mut nodes = Vec::new();
        for i in 0.. {
            match self.get_u32(&format!("nodelist.node.{i}.nodeid"))? {
                Some(id) => nodes.push(id),
                None => break,
            }
        }
        Ok(nodes)
    }

    /// A string key of any length (`totem.cluster_name`); `None` if absent.
    pub fn get_string(&self, key: &str) -> Result<Option<String>, CpgError> {
        let Ok(k) = CString::new(key) else {
            return Ok(None);
        };
        let mut p: *mut std::os::raw::c_char = std::ptr::null_mut();
        // SAFETY: live handle, NUL-terminated key; cmap allocates the value with malloc.
        match unsafe { sys::cmap_get_string(self.handle, k.as_ptr(), &raw mut p) } {
            sys::CS_OK if !p.is_null() => {
                // SAFETY: cmap returned a NUL-terminated malloc'ed string that we own.
                let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
                // SAFETY: allocated by cmap with malloc, freed once.
                unsafe { libc::free(p.cast::<c_void>()) };
                Ok(Some(s))
            }
            sys::CS_OK => Ok(None),
            12 => Ok(None),
            code => check("cmap_get_string", code).map(|()| None),
        }
    }
}

impl Drop for Cmap {
    fn drop(&mut self) {
        // SAFETY: live handle, finalized once.
        unsafe {
            sys::cmap_finalize(self.handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_bytes() {
        let mut s = [0u8; 128];
        s[..8].copy_from_slice(&[2, 0, 0, 0, 127, 0, 0, 1]); // observed for 127.0.0.1
        assert_eq!(
            parse_sockaddr(&s),
            Some("127.0.0.1:0".parse().expect("addr"))
        );
        let mut s6 = [0u8; 128];
        s6[..2].copy_from_slice(&10u16.to_ne_bytes());
        s6[23] = 1;
        assert_eq!(parse_sockaddr(&s6), Some("[::1]:0".parse().expect("addr")));
        assert_eq!(parse_sockaddr(&[0u8; 128]), None);
    }
}
