//! The kernel ABI, in host byte order: what crosses `/dev/misc/dlm_plock`,
//! `/dev/misc/dlm-control` and the uevent netlink socket.

mod control;
mod plock_info;
mod uevent;

pub use control::{
    ControlError, ControlRequest, DEVICE_VERSION, RawWriteRequestHead, WRITE_REQUEST_SIZE,
};
pub use plock_info::{
    PLOCK_INFO_SIZE, PLOCK_VERSION, PlockFlags, PlockInfo, PlockInfoError, PlockOp, PlockVersion,
    RawPlockInfo,
};
pub use uevent::{Uevent, UeventAction, UeventError};
