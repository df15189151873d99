//! Hand-written declarations of the corosync 3 client API that dlm_controld uses
//! (cpg.h, quorum.h, cfg.h, cmap.h, corotypes.h). `tests/layout.rs` compiles the real
//! headers and checks every struct here field by field.

#![allow(non_camel_case_types, missing_docs)]

use std::os::raw::{c_char, c_int, c_uint, c_void};

pub type cs_error_t = c_int;
pub const CS_OK: cs_error_t = 1;
pub const CS_ERR_LIBRARY: cs_error_t = 2;
pub const CS_ERR_TRY_AGAIN: cs_error_t = 6;
pub const CS_ERR_BAD_HANDLE: cs_error_t = 9;

pub type cs_dispatch_flags_t = c_int;
pub const CS_DISPATCH_ALL: cs_dispatch_flags_t = 2;
pub const CS_DISPATCH_ONE_NONBLOCKING: cs_dispatch_flags_t = 4;
pub const CS_TRACK_CURRENT: c_uint = 0x01;
pub const CS_TRACK_CHANGES: c_uint = 0x02;

// ---- cpg ----
pub type cpg_handle_t = u64;
pub const CPG_TYPE_AGREED: c_int = 2;
pub const CPG_MODEL_V1: c_int = 1;
pub const CPG_MODEL_V1_DELIVER_INITIAL_TOTEM_CONF: c_uint = 0x01;
pub const CPG_MAX_NAME_LENGTH: usize = 128;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cpg_name {
    pub length: u32,
    pub value: [c_char; CPG_MAX_NAME_LENGTH],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cpg_address {
    pub nodeid: u32,
    pub pid: u32,
    pub reason: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cpg_ring_id {
    pub nodeid: u32,
    pub seq: u64,
}

pub type cpg_deliver_fn_t =
    Option<unsafe extern "C" fn(cpg_handle_t, *const cpg_name, u32, u32, *mut c_void, usize)>;
pub type cpg_confchg_fn_t = Option<
    unsafe extern "C" fn(
        cpg_handle_t,
        *const cpg_name,
        *const cpg_address,
        usize,
        *const cpg_address,
        usize,
        *const cpg_address,
        usize,
    ),
>;
pub type cpg_totem_confchg_fn_t =
    Option<unsafe extern "C" fn(cpg_handle_t, cpg_ring_id, u32, *const u32)>;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cpg_model_v1_data_t {
    pub model: c_int,
    pub cpg_deliver_fn: cpg_deliver_fn_t,
    pub cpg_confchg_fn: cpg_confchg_fn_t,
    pub cpg_totem_confchg_fn: cpg_totem_confchg_fn_t,
    pub flags: c_uint,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct iovec {
    pub iov_base: *const c_void,
    pub iov_len: usize,
}

unsafe extern "C" {
    pub fn cpg_model_initialize(
        handle: *mut cpg_handle_t,
        model: c_int,
        model_data: *mut cpg_model_v1_data_t,
        context: *mut c_void,
    ) -> cs_error_t;
    pub fn cpg_finalize(handle: cpg_handle_t) -> cs_error_t;
    pub fn cpg_fd_get(handle: cpg_handle_t, fd: *mut c_int) -> cs_error_t;
    pub fn cpg_context_get(handle: cpg_handle_t, context: *mut *mut c_void) -> cs_error_t;
    pub fn cpg_dispatch(handle: cpg_handle_t, flags: cs_dispatch_flags_t) -> cs_error_t;
    pub fn cpg_join(handle: cpg_handle_t, group: *const cpg_name) -> cs_error_t;
    pub fn cpg_leave(handle: cpg_handle_t, group: *const cpg_name) -> cs_error_t;
    pub fn cpg_mcast_joined(
        handle: cpg_handle_t,
        guarantee: c_int,
        iovec: *const iovec,
        iov_len: c_uint,
    ) -> cs_error_t;
    pub fn cpg_local_get(handle: cpg_handle_t, local_nodeid: *mut c_uint) -> cs_error_t;
}

// ---- quorum ----
pub type quorum_handle_t = u64;
pub type quorum_notification_fn_t =
    Option<unsafe extern "C" fn(quorum_handle_t, u32, u64, u32, *mut u32)>;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct quorum_callbacks_t {
    pub quorum_notify_fn: quorum_notification_fn_t,
}

unsafe extern "C" {
    pub fn quorum_initialize(
        handle: *mut quorum_handle_t,
        callbacks: *mut quorum_callbacks_t,
        quorum_type: *mut u32,
    ) -> cs_error_t;
    pub fn quorum_finalize(handle: quorum_handle_t) -> cs_error_t;
    pub fn quorum_fd_get(handle: quorum_handle_t, fd: *mut c_int) -> cs_error_t;
    pub fn quorum_dispatch(handle: quorum_handle_t, flags: cs_dispatch_flags_t) -> cs_error_t;
    pub fn quorum_getquorate(handle: quorum_handle_t, quorate: *mut c_int) -> cs_error_t;
    pub fn quorum_trackstart(handle: quorum_handle_t, flags: c_uint) -> cs_error_t;
    pub fn quorum_context_set(handle: quorum_handle_t, context: *const c_void) -> cs_error_t;
    pub fn quorum_context_get(handle: quorum_handle_t, context: *mut *const c_void) -> cs_error_t;
}

// ---- cfg ----
pub type corosync_cfg_handle_t = u64;
pub type corosync_cfg_shutdown_callback_t =
    Option<unsafe extern "C" fn(corosync_cfg_handle_t, c_int)>;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct corosync_cfg_callbacks_t {
    pub corosync_cfg_shutdown_callback: corosync_cfg_shutdown_callback_t,
}

/// `COROSYNC_CFG_SHUTDOWN_FLAG_REQUEST`: a polite request that any client may refuse.
pub const COROSYNC_CFG_SHUTDOWN_FLAG_REQUEST: c_int = 0;
/// `COROSYNC_CFG_SHUTDOWN_FLAG_NO`
pub const COROSYNC_CFG_SHUTDOWN_FLAG_NO: c_int = 0;
/// `COROSYNC_CFG_SHUTDOWN_FLAG_YES`
pub const COROSYNC_CFG_SHUTDOWN_FLAG_YES: c_int = 1;

/// `sizeof(struct sockaddr_in6)` bytes of address.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct corosync_cfg_node_address_t {
    pub address_length: c_int,
    pub address: [c_char; 28],
}

unsafe extern "C" {
    pub fn corosync_cfg_initialize(
        handle: *mut corosync_cfg_handle_t,
        callbacks: *const corosync_cfg_callbacks_t,
    ) -> cs_error_t;
    pub fn corosync_cfg_finalize(handle: corosync_cfg_handle_t) -> cs_error_t;
    pub fn corosync_cfg_local_get(handle: corosync_cfg_handle_t, nodeid: *mut c_uint)
    -> cs_error_t;
    pub fn corosync_cfg_get_node_addrs(
        handle: corosync_cfg_handle_t,
        nodeid: c_uint,
        max_addrs: usize,
        num_addrs: *mut c_int,
        addrs: *mut corosync_cfg_node_address_t,
    ) -> cs_error_t;
    pub fn corosync_cfg_fd_get(handle: corosync_cfg_handle_t, fd: *mut c_int) -> cs_error_t;
    pub fn corosync_cfg_dispatch(
        handle: corosync_cfg_handle_t,
        flags: cs_dispatch_flags_t,
    ) -> cs_error_t;
    pub fn corosync_cfg_trackstart(handle: corosync_cfg_handle_t, flags: u8) -> cs_error_t;
    pub fn corosync_cfg_replyto_shutdown(handle: corosync_cfg_handle_t, flags: c_int)
    -> cs_error_t;
    pub fn corosync_cfg_kill_node(
        handle: corosync_cfg_handle_t,
        nodeid: c_uint,
        reason: *const c_char,
    ) -> cs_error_t;
}

// ---- cmap ----
pub type cmap_handle_t = u64;

unsafe extern "C" {
    pub fn cmap_initialize(handle: *mut cmap_handle_t) -> cs_error_t;
    pub fn cmap_finalize(handle: cmap_handle_t) -> cs_error_t;
    pub fn cmap_get_uint8(handle: cmap_handle_t, key: *const c_char, value: *mut u8) -> cs_error_t;
    pub fn cmap_get_uint32(
        handle: cmap_handle_t,
        key: *const c_char,
        value: *mut u32,
    ) -> cs_error_t;
    pub fn cmap_get_string(
        handle: cmap_handle_t,
        key: *const c_char,
        value: *mut *mut c_char,
    ) -> cs_error_t;
}
