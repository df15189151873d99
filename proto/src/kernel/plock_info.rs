//! `struct dlm_plock_info` (linux/dlm_plock.h): 64 bytes, host byte order, one per read()
//! or write() of `/dev/misc/dlm_plock`.

use std::fmt;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Size of one request or reply on the plock device.
pub const PLOCK_INFO_SIZE: usize = 64;

/// `DLM_PLOCK_VERSION_{MAJOR,MINOR,PATCH}`: 1.2.0, unchanged through the newest kernels.
pub const PLOCK_VERSION: PlockVersion = PlockVersion([1, 2, 0]);

/// The C layout, field for field (`struct dlm_plock_info`).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RawPlockInfo {
    /// `version[3]`
    pub version: [u32; 3],
    /// `optype`
    pub optype: u8,
    /// `ex`
    pub ex: u8,
    /// `wait`
    pub wait: u8,
    /// `flags`
    pub flags: u8,
    /// `pid`
    pub pid: u32,
    /// `nodeid`
    pub nodeid: i32,
    /// `rv`
    pub rv: i32,
    /// `fsid`
    pub fsid: u32,
    /// `number`
    pub number: u64,
    /// `start`
    pub start: u64,
    /// `end`
    pub end: u64,
    /// `owner`
    pub owner: u64,
}

const _: () = assert!(size_of::<RawPlockInfo>() == PLOCK_INFO_SIZE);

/// The plock ABI version carried in every request and reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlockVersion(pub [u32; 3]);

impl PlockVersion {
    /// The kernel's rule for a written reply (`dev_write` → `check_version`): the major must
    /// be 1 and the minor no higher than the kernel's own (2).
    pub fn accepted_by_kernel(self) -> bool {
        self.0[0] == PLOCK_VERSION.0[0] && self.0[1] <= PLOCK_VERSION.0[1]
    }
}

/// `optype`: relayed even when unknown (the originator answers an unknown op with -EINVAL,
/// so the value must survive decoding), hence a newtype and not an enum.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PlockOp(pub u8);

impl PlockOp {
    /// `DLM_PLOCK_OP_LOCK`
    pub const LOCK: Self = Self(1);
    /// `DLM_PLOCK_OP_UNLOCK`
    pub const UNLOCK: Self = Self(2);
    /// `DLM_PLOCK_OP_GET`
    pub const GET: Self = Self(3);
    /// `DLM_PLOCK_OP_CANCEL` (kernel ≥ 6.6)
    pub const CANCEL: Self = Self(4);

    /// The C constant's name, or `None` for an op no kernel sends.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Self::LOCK => Some("DLM_PLOCK_OP_LOCK"),
            Self::UNLOCK => Some("DLM_PLOCK_OP_UNLOCK"),
            Self::GET => Some("DLM_PLOCK_OP_GET"),
            Self::CANCEL => Some("DLM_PLOCK_OP_CANCEL"),
            _ => None,
        }
    }
}

impl fmt::Debug for PlockOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "PlockOp({:#04x})", self.0),
        }
    }
}

/// `flags`: bit 0 is `DLM_PLOCK_FL_CLOSE`; other bits are kept so a reply echoes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PlockFlags(pub u8);

impl PlockFlags {
    /// `DLM_PLOCK_FL_CLOSE`: the unlock of a closing file; the kernel expects no reply.
    pub const CLOSE: u8 = 1;

    /// Whether `DLM_PLOCK_FL_CLOSE` is set.
    pub fn close(self) -> bool {
        self.0 & Self::CLOSE != 0
    }
}

/// Why 64 bytes are not a plock request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlockInfoError {
    /// Not exactly 64 bytes.
    #[error("plock record is {0} bytes, expected 64")]
    Length(usize),
    /// A major version other than 1.
    #[error("plock record version {0:?} has an unknown major version")]
    Version([u32; 3]),
    /// `ex` or `wait` is neither 0 nor 1.
    #[error("plock record field {field} is {value}, expected 0 or 1")]
    Bool {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u8,
    },
    /// `start` after `end`.
    #[error("plock record range {start:#x}-{end:#x} is reversed")]
    Range {
        /// First byte.
        start: u64,
        /// Last byte.
        end: u64,
    },
}

/// A validated plock request or reply. The same value is sent to peers in the CPG PLOCK
/// message (see `wire::PlockMsg`), little-endian there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlockInfo {
    /// ABI version, echoed in replies.
    pub version: PlockVersion,
    /// Operation.
    pub op: PlockOp,
    /// Write lock (`F_WRLCK`) rather than read.
    pub ex: bool,
    /// Blocking request (`F_SETLKW`).
    pub wait: bool,
    /// Flags (`DLM_PLOCK_FL_CLOSE`).
    pub flags: PlockFlags,
    /// Caller's tgid; informational only.
    pub pid: u32,
    /// Originating node (0 from the kernel; the daemon sets its own).
    pub nodeid: i32,
    /// Result in replies.
    pub rv: i32,
    /// Lockspace global id.
    pub fsid: u32,
    /// Resource (inode) number.
    pub number: u64,
    /// First byte, inclusive.
    pub start: u64,
    /// Last byte, inclusive (`0x7fffffffffffffff` = to EOF).
    pub end: u64,
    /// Lock owner (files_struct or struct file pointer).
    pub owner: u64,
}

fn flag(field: &'static str, value: u8) -> Result<bool, PlockInfoError> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(PlockInfoError::Bool { field, value }),
    }
}

impl PlockInfo {
    /// Decodes one record read from the device.
    pub fn decode(bytes: &[u8]) -> Result<Self, PlockInfoError> {
        let raw = RawPlockInfo::read_from_bytes(bytes)
            .map_err(|_| PlockInfoError::Length(bytes.len()))?;
        Self::try_from(&raw)
    }

    /// The record to write to the device.
    pub fn encode(&self) -> [u8; PLOCK_INFO_SIZE] {
        let mut out = [0u8; PLOCK_INFO_SIZE];
        out.copy_from_slice(self.to_raw().as_bytes());
        out
    }

    /// The C layout of this value.
    pub fn to_raw(&self) -> RawPlockInfo {
        RawPlockInfo {
            version: self.version.0,
            optype: self.op.0,
            ex: u8::from(self.ex),
            wait: u8::from(self.wait),
            flags: self.flags.0,
            pid: self.pid,
            nodeid: self.nodeid,
            rv: self.rv,
            fsid: self.fsid,
            number: self.number,
            start: self.start,
            end: self.end,
            owner: self.owner,
        }
    }
}

impl TryFrom<&RawPlockInfo> for PlockInfo {
    type Error = PlockInfoError;

    fn try_from(raw: &RawPlockInfo) -> Result<Self, PlockInfoError> {
        if raw.version[0] != PLOCK_VERSION.0[0] {
            return Err(PlockInfoError::Version(raw.version));
        }
        if raw.start > raw.end {
            return Err(PlockInfoError::Range {
                start: raw.start,
                end: raw.end,
            });
        }
        Ok(Self {
            version: PlockVersion(raw.version),
            op: PlockOp(raw.optype),
            ex: flag("ex", raw.ex)?,
            wait: flag("wait", raw.wait)?,
            flags: PlockFlags(raw.flags),
            pid: raw.pid,
            nodeid: raw.nodeid,
            rv: raw.rv,
            fsid: raw.fsid,
            number: raw.number,
            start: raw.start,
            end: raw.end,
            owner: raw.owner,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_rule() {
        assert!(PlockVersion([1, 2, 0]).accepted_by_kernel());
        assert!(PlockVersion([1, 1, 0]).accepted_by_kernel());
        assert!(!PlockVersion([1, 3, 0]).accepted_by_kernel());
        assert!(!PlockVersion([2, 0, 0]).accepted_by_kernel());
    }

    #[test]
    fn op_debug_names() {
        assert_eq!(format!("{:?}", PlockOp::CANCEL), "DLM_PLOCK_OP_CANCEL");
        assert_eq!(format!("{:?}", PlockOp(9)), "PlockOp(0x09)");
    }
}
