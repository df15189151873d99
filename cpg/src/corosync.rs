//! Corosync CPG through our own thin bindings ([`crate::sys`]).
//!
//! Design (corosync-notes §5–6): every handle owns a heap `Inner` whose address is the C
//! context passed to `cpg_model_initialize`; the `extern "C"` trampolines find it again
//! (from the dispatching thread's [`Dispatching`] mark, else with `cpg_context_get`), only
//! append an owned [`Event`] to its queue, and run inside `catch_unwind`, so a bug there
//! can neither unwind into C nor abort the process. No global lock exists; finalize
//! happens in `Drop`, never from a callback.
//!
//! Limitations: `cpg_dispatch` keeps a 1 MiB buffer on the stack and libcpg is built
//! without stack probes, so [`CorosyncGroup::dispatch`] must run on a thread with at least
//! 2 MiB of stack (the main thread, tokio workers and std threads by default have it).

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::os::raw::{c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::sys;
use crate::{CpgError, Event, Group, Member, Reason, RingId};

#[derive(Debug, Default)]
struct Inner {
    events: VecDeque<Event>,
    /// A trampoline panicked: the event it was building is lost, so the group is unusable.
    poisoned: bool,
}

/// A joined CPG group on the local corosync.
#[derive(Debug)]
pub struct CorosyncGroup {
    handle: sys::cpg_handle_t,
    name: sys::cpg_name,
    nodeid: u32,
    inner: *mut Inner,
    outq: VecDeque<Vec<u8>>,
    /// The last `flush_some` met TRY_AGAIN.
    pushed_back: bool,
    joined: bool,
    fd: RawFd,
}

// SAFETY: the libcpg handle may be used from any thread (libcpg serialises calls on a
// handle internally); `inner` is only touched by trampolines running inside our own
// `cpg_dispatch` calls, which need `&mut self`, so it is never shared between threads.
unsafe impl Send for CorosyncGroup {}

fn check(call: &'static str, code: sys::cs_error_t) -> Result<(), CpgError> {
    match code {
        sys::CS_OK => Ok(()),
        sys::CS_ERR_TRY_AGAIN => Err(CpgError::TryAgain),
        sys::CS_ERR_LIBRARY | sys::CS_ERR_BAD_HANDLE => Err(CpgError::Gone { call, code }),
        code => Err(CpgError::Call { call, code }),
    }
}

/// A CPG name from bytes with an explicit length: the caller decides whether a trailing
/// NUL belongs to the name (dlm_controld's names count it).
fn cpg_name(bytes: &[u8]) -> Result<sys::cpg_name, CpgError> {
    if bytes.len() > sys::CPG_MAX_NAME_LENGTH {
        return Err(CpgError::NameTooLong(bytes.len()));
    }
    let mut name = sys::cpg_name {
        length: u32::try_from(bytes.len()).map_err(|_| CpgError::NameTooLong(bytes.len()))?,
        value: [0; sys::CPG_MAX_NAME_LENGTH],
    };
    for (d, s) in name.value.iter_mut().zip(bytes) {
        *d = c_char_from(*s);
    }
    Ok(name)
}

#[allow(clippy::cast_possible_wrap)] // c_char is i8 here: a bit-for-bit reinterpretation
fn c_char_from(b: u8) -> std::os::raw::c_char {
    b as std::os::raw::c_char
}

thread_local! {
    /// The handle this thread is dispatching and its `Inner` (see [`Dispatching`]).
    static DISPATCHING: std::cell::Cell<(sys::cpg_handle_t, *mut Inner)> =
        const { std::cell::Cell::new((0, std::ptr::null_mut())) };
}

/// Marks, for the trampolines, which handle this thread dispatches and where its `Inner`
/// is, for as long as one `cpg_dispatch` call runs: they find it without
/// `cpg_context_get`, whose handle-table lookup and locks every delivered message would
/// pay. The mark before is put back on drop.
struct Dispatching((sys::cpg_handle_t, *mut Inner));

impl Dispatching {
    fn mark(handle: sys::cpg_handle_t, inner: *mut Inner) -> Self {
        Self(DISPATCHING.with(|d| d.replace((handle, inner))))
    }
}

impl Drop for Dispatching {
    fn drop(&mut self) {
        DISPATCHING.with(|d| d.set(self.0));
    }
}

/// The `Inner` of `handle`: the dispatching thread's mark when it names `handle`, else the
/// context libcpg keeps (null when it has none).
///
/// # Safety
/// `handle` must be a live handle created by [`CorosyncGroup::join`].
unsafe fn inner_of(handle: sys::cpg_handle_t) -> *mut Inner {
    let (marked, inner) = DISPATCHING.with(std::cell::Cell::get);
    if marked == handle && !inner.is_null() {
        return inner;
    }
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: handle is live (caller's contract); ctx is a valid out-pointer.
    if unsafe { sys::cpg_context_get(handle, &raw mut ctx) } != sys::CS_OK {
        return std::ptr::null_mut();
    }
    ctx.cast::<Inner>()
}

/// Runs `f` on the `Inner` of `handle`, catching any panic.
///
/// # Safety
/// `handle` must be a live handle created by [`CorosyncGroup::join`], called from within
/// `cpg_dispatch` on it.
unsafe fn with_inner(handle: sys::cpg_handle_t, f: impl FnOnce(&mut Inner)) {
    // SAFETY: handle is live (caller's contract).
    let ctx = unsafe { inner_of(handle) };
    if ctx.is_null() {
        return;
    }
    // SAFETY: the mark and the context are both the `Box<Inner>` pointer set at join,
    // alive until finalize, and only reached from dispatch, which holds
    // `&mut CorosyncGroup`.
    let inner = unsafe { &mut *ctx };
    if catch_unwind(AssertUnwindSafe(|| f(inner))).is_err() {
        inner.poisoned = true;
    }
}

/// # Safety
/// `list` must point to `n` readable entries (or `n` be 0).
unsafe fn members(list: *const sys::cpg_address, n: usize) -> Vec<Member> {
    if list.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: caller's contract.
    let s = unsafe { std::slice::from_raw_parts(list, n) };
    s.iter()
        .map(|a| Member {
            nodeid: a.nodeid,
            pid: a.pid,
            reason: Reason::from_raw(a.reason),
        })
        .collect()
}

unsafe extern "C" fn deliver_cb(
    handle: sys::cpg_handle_t,
    _group: *const sys::cpg_name,
    nodeid: u32,
    pid: u32,
    msg: *mut c_void,
    len: usize,
) {
    // SAFETY: libcpg calls this from our dispatch with a live handle.
    unsafe {
        with_inner(handle, |inner| {
            let payload = if msg.is_null() || len == 0 {
                Vec::new()
            } else {
                // SAFETY: libcpg hands `len` readable bytes for the callback's duration.
                std::slice::from_raw_parts(msg.cast::<u8>(), len).to_vec()
            };
            inner.events.push_back(Event::Deliver {
                nodeid,
                pid,
                payload,
            });
        });
    }
}

#[allow(clippy::too_many_arguments)] // the C callback's signature
unsafe extern "C" fn confchg_cb(
    handle: sys::cpg_handle_t,
    _group: *const sys::cpg_name,
    member_list: *const sys::cpg_address,
    member_n: usize,
    left_list: *const sys::cpg_address,
    left_n: usize,
    joined_list: *const sys::cpg_address,
    joined_n: usize,
) {
    // SAFETY: libcpg calls this from our dispatch with a live handle and valid lists.
    unsafe {
        with_inner(handle, |inner| {
            inner.events.push_back(Event::ConfChg {
                members: members(member_list, member_n),
                left: members(left_list, left_n),
                joined: members(joined_list, joined_n),
            });
        });
    }
}

unsafe extern "C" fn totem_cb(
    handle: sys::cpg_handle_t,
    ring: sys::cpg_ring_id,
    n: u32,
    list: *const u32,
) {
    // SAFETY: libcpg calls this from our dispatch with a live handle and `n` entries.
    unsafe {
        with_inner(handle, |inner| {
            let members = if list.is_null() || n == 0 {
                Vec::new()
            } else {
                // SAFETY: as above.
                std::slice::from_raw_parts(list, n as usize).to_vec()
            };
            inner.events.push_back(Event::Totem {
                ring: RingId {
                    nodeid: ring.nodeid,
                    seq: ring.seq,
                },
                members,
            });
        });
    }
}

impl CorosyncGroup {
    /// Connects to the local corosync and joins the group `name` (bytes with an explicit
    /// length). With `initial_totem`, the current ring arrives as the first `Totem` event
    /// (`CPG_MODEL_V1_DELIVER_INITIAL_TOTEM_CONF`, as dlm_controld asks).
    ///
    /// `CpgError::TryAgain` from the join is returned as is: the caller retries later.
    pub fn join(name: &[u8], initial_totem: bool) -> Result<Self, CpgError> {
        let name = cpg_name(name)?;
        let inner = Box::into_raw(Box::<Inner>::default());
        let mut model = sys::cpg_model_v1_data_t {
            model: sys::CPG_MODEL_V1,
            cpg_deliver_fn: Some(deliver_cb),
            cpg_confchg_fn: Some(confchg_cb),
            cpg_totem_confchg_fn: Some(totem_cb),
            flags: if initial_totem {
                sys::CPG_MODEL_V1_DELIVER_INITIAL_TOTEM_CONF
            } else {
                0
            },
        };
        let mut handle: sys::cpg_handle_t = 0;
        // SAFETY: valid out-pointer and model data; the context outlives the handle (freed
        // in Drop after cpg_finalize).
        let rc = unsafe {
            sys::cpg_model_initialize(
                &raw mut handle,
                sys::CPG_MODEL_V1,
                &raw mut model,
                inner.cast::<c_void>(),
            )
        };
        if let Err(e) = check("cpg_model_initialize", rc) {
            // SAFETY: inner came from Box::into_raw above and was not handed to a handle.
            drop(unsafe { Box::from_raw(inner) });
            return Err(e);
        }
        let mut group = Self {
            handle,
            name,
            nodeid: 0,
            inner,
            outq: VecDeque::new(),
            pushed_back: false,
            joined: false,
            fd: -1,
        };
        let mut fd: c_int = -1;
        // SAFETY: live handle, valid out-pointer.
        check("cpg_fd_get", unsafe {
            sys::cpg_fd_get(handle, &raw mut fd)
        })?;
        group.fd = fd;
        let mut nodeid: c_uint = 0;
        // SAFETY: live handle, valid out-pointer.
        check("cpg_local_get", unsafe {
            sys::cpg_local_get(handle, &raw mut nodeid)
        })?;
        group.nodeid = nodeid;
        // SAFETY: live handle, name is a valid cpg_name.
        check("cpg_join", unsafe {
            sys::cpg_join(handle, &raw const group.name)
        })?;
        group.joined = true;
        Ok(group)
    }

    /// The fd that is readable while events wait for [`Group::dispatch`]. It belongs to
    /// libqb: never close it, and stop polling it before dropping the group.
    pub fn as_raw_fd(&self) -> Result<RawFd, CpgError> {
        let mut fd: c_int = -1;
        // SAFETY: live handle, valid out-pointer.
        check("cpg_fd_get", unsafe {
            sys::cpg_fd_get(self.handle, &raw mut fd)
        })?;
        Ok(fd)
    }

    /// Leaves the group (members see reason `Leave`); the handle stays open for the
    /// confchg that confirms it.
    pub fn leave(&mut self) -> Result<(), CpgError> {
        if !self.joined {
            return Ok(());
        }
        // SAFETY: live handle, valid name.
        check("cpg_leave", unsafe {
            sys::cpg_leave(self.handle, &raw const self.name)
        })?;
        self.joined = false;
        Ok(())
    }

    fn inner(&mut self) -> &mut Inner {
        // SAFETY: inner is the live Box allocated in join and freed only in Drop.
        unsafe { &mut *self.inner }
    }

    /// Queues `payload` behind anything already queued without sending now (a sender of a
    /// long burst hands it over in [`Self::flush_some`] portions).
    pub fn enqueue(&mut self, payload: Vec<u8>) -> Result<(), CpgError> {
        if !self.joined {
            return Err(CpgError::Closed);
        }
        self.outq.push_back(payload);
        Ok(())
    }

    /// Sends at most `max` queued messages: `Ok(true)` when the queue is empty, `Ok(false)`
    /// when corosync pushed back or the budget ran out (then [`Self::pushed_back`] says which).
    pub fn flush_some(&mut self, max: usize) -> Result<bool, CpgError> {
        self.pushed_back = false;
        for _ in 0..max {
            let Some(m) = self.outq.front() else {
                return Ok(true);
            };
            match self.send_one(m) {
                Ok(()) => {
                    self.outq.pop_front();
                }
                Err(CpgError::TryAgain) => {
                    self.pushed_back = true;
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(self.outq.is_empty())
    }

    /// Dispatches at most `max` pending messages (`CS_DISPATCH_ONE_NONBLOCKING` each):
    /// `Ok(true)` when corosync has nothing more right now, `Ok(false)` when the budget ran
    /// out first. `CS_DISPATCH_ALL` keeps dispatching while deliveries keep arriving, which
    /// during a long stream (a state transfer) holds the caller for the whole stream.
    pub fn dispatch_some(&mut self, max: usize) -> Result<bool, CpgError> {
        check_dispatch_stack("cpg_dispatch")?;
        for _ in 0..max {
            let mark = Dispatching::mark(self.handle, self.inner);
            // SAFETY: live handle; callbacks only touch `inner` (see with_inner).
            let rc = unsafe { sys::cpg_dispatch(self.handle, sys::CS_DISPATCH_ONE_NONBLOCKING) };
            drop(mark);
            if self.inner().poisoned {
                return Err(CpgError::CallbackPanicked);
            }
            match check("cpg_dispatch", rc) {
                Ok(()) => {}
                Err(CpgError::TryAgain) => return Ok(true),
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// The last [`Self::flush_some`] stopped at corosync's TRY_AGAIN (not at its budget).
    pub fn pushed_back(&self) -> bool {
        self.pushed_back
    }

    fn send_one(&self, payload: &[u8]) -> Result<(), CpgError> {
        let iov = sys::iovec {
            iov_base: payload.as_ptr().cast::<c_void>(),
            iov_len: payload.len(),
        };
        // SAFETY: live handle; the iovec points at `payload` for the call's duration.
        check("cpg_mcast_joined", unsafe {
            sys::cpg_mcast_joined(self.handle, sys::CPG_TYPE_AGREED, &raw const iov, 1)
        })
    }
}

/// Bytes of stack the current thread was created with (0 if unknown).
fn thread_stack_size() -> usize {
    // SAFETY: pthread_getattr_np fills a zeroed attr for the calling thread, which is
    // destroyed after reading the size.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &raw mut attr) != 0 {
            return 0;
        }
        let mut size: usize = 0;
        let rc = libc::pthread_attr_getstacksize(&raw const attr, &raw mut size);
        libc::pthread_attr_destroy(&raw mut attr);
        if rc == 0 { size } else { 0 }
    }
}

/// libcpg's dispatch puts ~1 MiB on the stack without probes: on a smaller stack it would
/// silently overwrite memory below it (corosync-notes §5.2), so refuse instead.
pub(crate) fn check_dispatch_stack(call: &'static str) -> Result<(), CpgError> {
    thread_local! {
        static STACK: usize = thread_stack_size();
    }
    let stack = STACK.with(|s| *s);
    if stack >= 2 << 20 {
        Ok(())
    } else {
        Err(CpgError::SmallStack { call, stack })
    }
}

impl Group for CorosyncGroup {
    fn local_nodeid(&self) -> u32 {
        self.nodeid
    }

    fn mcast(&mut self, payload: &[u8]) -> Result<(), CpgError> {
        if !self.joined {
            return Err(CpgError::Closed);
        }
        if self.outq.is_empty() {
            match self.send_one(payload) {
                Err(CpgError::TryAgain) => {}
                other => return other,
            }
        }
        self.outq.push_back(payload.to_vec());
        Ok(())
    }

    fn flush(&mut self) -> Result<bool, CpgError> {
        while let Some(m) = self.outq.front() {
            match self.send_one(m) {
                Ok(()) => {
                    self.outq.pop_front();
                }
                Err(CpgError::TryAgain) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn dispatch(&mut self) -> Result<(), CpgError> {
        check_dispatch_stack("cpg_dispatch")?;
        let mark = Dispatching::mark(self.handle, self.inner);
        // SAFETY: live handle; callbacks only touch `inner` (see with_inner).
        let rc = unsafe { sys::cpg_dispatch(self.handle, sys::CS_DISPATCH_ALL) };
        drop(mark);
        if self.inner().poisoned {
            return Err(CpgError::CallbackPanicked);
        }
        match check("cpg_dispatch", rc) {
            Err(CpgError::TryAgain) => Ok(()),
            other => other,
        }
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.inner().events.pop_front()
    }

    fn send_queue_len(&self) -> usize {
        self.outq.len()
    }
}

impl Drop for CorosyncGroup {
    fn drop(&mut self) {
        // SAFETY: live handle, finalized once, never from inside a callback (callbacks
        // cannot reach the group).
        unsafe {
            sys::cpg_finalize(self.handle);
        }
        // SAFETY: from Box::into_raw in join; libcpg no longer references it.
        drop(unsafe { Box::from_raw(self.inner) });
    }
}

impl std::os::fd::AsRawFd for CorosyncGroup {
    /// The libqb fd, fixed for the handle's life.
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The trampolines find the `Inner` of the handle being dispatched from the mark, and
    /// only for that handle: another handle (here, none libcpg knows) goes to libcpg, which
    /// knows no context for it; the mark before comes back when a mark ends.
    #[test]
    fn the_dispatching_mark_names_one_handle_for_one_call() {
        let mut a = Inner::default();
        let mut b = Inner::default();
        let (pa, pb) = (&raw mut a, &raw mut b);
        // SAFETY: no handle here is live, so libcpg's lookup fails and returns no context
        // (what the test checks); the marked pointers outlive the marks.
        unsafe {
            assert!(inner_of(7).is_null());
            let outer = Dispatching::mark(7, pa);
            assert_eq!(inner_of(7), pa);
            assert!(inner_of(8).is_null());
            {
                let _inner = Dispatching::mark(8, pb);
                assert_eq!(inner_of(8), pb);
                assert!(inner_of(7).is_null());
            }
            assert_eq!(inner_of(7), pa);
            drop(outer);
            assert!(inner_of(7).is_null());
        }
    }
}
