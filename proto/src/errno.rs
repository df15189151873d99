//! The Linux errno values that cross an interface of the daemon (plock replies, query and
//! control replies, FENCE_RESULT results), positive as in `<errno.h>`; a reply carries the
//! negated value. One list for every crate (`dlm-plock` may not use libc);
//! `dlm_controld/tests/seam.rs` checks each against libc.

/// `EPERM`
pub const EPERM: i32 = 1;
/// `ENOENT`
pub const ENOENT: i32 = 2;
/// `EIO`
pub const EIO: i32 = 5;
/// `EAGAIN`
pub const EAGAIN: i32 = 11;
/// `EEXIST`
pub const EEXIST: i32 = 17;
/// `EINVAL`
pub const EINVAL: i32 = 22;
/// `EDEADLK`
pub const EDEADLK: i32 = 35;
/// `ENOLCK`
pub const ENOLCK: i32 = 37;
/// `ENOSPC`
pub const ENOSPC: i32 = 28;
/// `ENODATA`
pub const ENODATA: i32 = 61;
/// `EOPNOTSUPP`
pub const EOPNOTSUPP: i32 = 95;
/// `ECANCELED`
pub const ECANCELED: i32 = 125;
