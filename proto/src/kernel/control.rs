//! The `dlm-control` write request (`struct dlm_write_request`, linux/dlm_device.h) that
//! libdlm writes to create or remove a lockspace (`dlm_tool join` / `leave`).
//!
//! Only the lockspace commands are modelled; the lock commands go to per-lockspace devices
//! and never concern the daemon.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::{DLM_LOCKSPACE_LEN, LockspaceName, NameError};

/// `DLM_DEVICE_VERSION_{MAJOR,MINOR,PATCH}`: 6.0.2.
pub const DEVICE_VERSION: [u32; 3] = [6, 0, 2];

/// `DLM_USER_CREATE_LOCKSPACE`
const CMD_CREATE: u8 = 4;
/// `DLM_USER_REMOVE_LOCKSPACE`
const CMD_REMOVE: u8 = 5;

/// `sizeof(struct dlm_write_request)` on 64-bit Linux: the union is sized by
/// `struct dlm_lock_params` (104 bytes) at offset 16.
pub const WRITE_REQUEST_SIZE: usize = 120;

/// The first 24 bytes of `struct dlm_write_request` with the union read as
/// `struct dlm_lspace_params` (flags, minor); the name follows at offset 24.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RawWriteRequestHead {
    /// `version[3]`
    pub version: [u32; 3],
    /// `cmd`
    pub cmd: u8,
    /// `is64bit`
    pub is64bit: u8,
    /// `unused[2]`
    pub unused: [u8; 2],
    /// `i.lspace.flags`
    pub flags: u32,
    /// `i.lspace.minor`
    pub minor: u32,
}

const HEAD: usize = size_of::<RawWriteRequestHead>();
const _: () = assert!(HEAD == 24);

/// A lockspace request written to `dlm-control`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlRequest {
    /// `DLM_USER_CREATE_LOCKSPACE`: the kernel answers with the new device's minor.
    Create {
        /// Lockspace name.
        name: LockspaceName,
        /// `DLM_USER_LSFLG_*`
        flags: u32,
    },
    /// `DLM_USER_REMOVE_LOCKSPACE` of the lockspace whose device has this minor.
    Remove {
        /// Minor of `/dev/misc/dlm_<name>`.
        minor: u32,
        /// `DLM_USER_LSFLG_FORCEFREE` (2) to remove a lockspace still in use.
        flags: u32,
    },
}

/// Why bytes written to `dlm-control` are not a lockspace request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// Shorter than the fixed part.
    #[error("control request is {0} bytes, at least 24 needed")]
    Short(usize),
    /// Device interface major version is not 6.
    #[error("control request version {0:?} is not 6.x")]
    Version([u32; 3]),
    /// A command other than create or remove lockspace.
    #[error("control request command {0} is not a lockspace command")]
    Command(u8),
    /// A 32-bit layout (`is64bit` = 0), which this daemon does not speak.
    #[error("control request uses the 32-bit layout")]
    Not64Bit,
    /// The name is not a lockspace name.
    #[error("control request name: {0}")]
    Name(#[from] NameError),
}

impl ControlRequest {
    /// Encodes as libdlm's `create_lockspace_v6`/`release_lockspace_v6` write: the whole
    /// 120-byte struct, plus the name's length again for create. Returns the buffer and the
    /// number of bytes to write.
    pub fn encode(&self) -> ([u8; WRITE_REQUEST_SIZE + DLM_LOCKSPACE_LEN], usize) {
        let mut buf = [0u8; WRITE_REQUEST_SIZE + DLM_LOCKSPACE_LEN];
        let (cmd, flags, minor) = match *self {
            Self::Create { flags, .. } => (CMD_CREATE, flags, 0),
            Self::Remove { minor, flags } => (CMD_REMOVE, flags, minor),
        };
        let head = RawWriteRequestHead {
            version: DEVICE_VERSION,
            cmd,
            is64bit: 1,
            unused: [0; 2],
            flags,
            minor,
        };
        buf[..HEAD].copy_from_slice(head.as_bytes());
        let len = match self {
            Self::Create { name, .. } => {
                let n = name.as_bytes();
                buf[HEAD..HEAD + n.len()].copy_from_slice(n);
                WRITE_REQUEST_SIZE + n.len()
            }
            Self::Remove { .. } => WRITE_REQUEST_SIZE,
        };
        (buf, len)
    }

    /// Decodes one write as the kernel's `device_write` would.
    pub fn decode(bytes: &[u8]) -> Result<Self, ControlError> {
        let (head, rest) = RawWriteRequestHead::read_from_prefix(bytes)
            .map_err(|_| ControlError::Short(bytes.len()))?;
        if head.version[0] != DEVICE_VERSION[0] {
            return Err(ControlError::Version(head.version));
        }
        if head.is64bit != 1 {
            return Err(ControlError::Not64Bit);
        }
        match head.cmd {
            CMD_CREATE => {
                let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                Ok(Self::Create {
                    name: LockspaceName::new(&rest[..end])?,
                    flags: head.flags,
                })
            }
            CMD_REMOVE => Ok(Self::Remove {
                minor: head.minor,
                flags: head.flags,
            }),
            other => Err(ControlError::Command(other)),
        }
    }
}
