//! PLOCK (3), PLOCK_OWN (4), PLOCK_DROP (5), PLOCK_SYNC_LOCK (6), PLOCK_SYNC_WAITER (7):
//! header + `struct dlm_plock_info` with every multi-byte field little-endian
//! (`info_bswap_out` in plock.c). 104 bytes.

use zerocopy::little_endian::{I32, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::{DlmHeader, HEADER_SIZE, WireError};
use crate::kernel::{
    PLOCK_INFO_SIZE, PlockFlags, PlockInfo, PlockInfoError, PlockOp, PlockVersion,
};

/// Size of a PLOCK message: header + 64.
pub const PLOCK_MSG_SIZE: usize = HEADER_SIZE + PLOCK_INFO_SIZE;

/// `struct dlm_plock_info` as sent over CPG (little-endian).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RawPlockInfoLe {
    /// `version[3]`
    pub version: [U32; 3],
    /// `optype`
    pub optype: u8,
    /// `ex`
    pub ex: u8,
    /// `wait`
    pub wait: u8,
    /// `flags`
    pub flags: u8,
    /// `pid`
    pub pid: U32,
    /// `nodeid`
    pub nodeid: I32,
    /// `rv`
    pub rv: I32,
    /// `fsid`
    pub fsid: U32,
    /// `number`
    pub number: U64,
    /// `start`
    pub start: U64,
    /// `end`
    pub end: U64,
    /// `owner`
    pub owner: U64,
}

const _: () = assert!(size_of::<RawPlockInfoLe>() == PLOCK_INFO_SIZE);

impl From<&PlockInfo> for RawPlockInfoLe {
    fn from(p: &PlockInfo) -> Self {
        Self {
            version: p.version.0.map(U32::new),
            optype: p.op.0,
            ex: u8::from(p.ex),
            wait: u8::from(p.wait),
            flags: p.flags.0,
            pid: U32::new(p.pid),
            nodeid: I32::new(p.nodeid),
            rv: I32::new(p.rv),
            fsid: U32::new(p.fsid),
            number: U64::new(p.number),
            start: U64::new(p.start),
            end: U64::new(p.end),
            owner: U64::new(p.owner),
        }
    }
}

fn flag(field: &'static str, value: u8) -> Result<bool, PlockInfoError> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(PlockInfoError::Bool { field, value }),
    }
}

/// Decodes the plock payload of types 3–7. Like C, reads the first 64 bytes and ignores any
/// more; unlike C, refuses fewer. The version is not checked: OWN/DROP/SYNC_LOCK carry zero.
pub(super) fn decode_plock_payload(payload: &[u8]) -> Result<PlockInfo, WireError> {
    let (raw, _) = RawPlockInfoLe::read_from_prefix(payload).map_err(|_| WireError::Short {
        what: "plock payload",
        need: PLOCK_MSG_SIZE,
        got: HEADER_SIZE + payload.len(),
    })?;
    let (start, end) = (raw.start.get(), raw.end.get());
    if start > end {
        return Err(PlockInfoError::Range { start, end }.into());
    }
    Ok(PlockInfo {
        version: PlockVersion(raw.version.map(U32::get)),
        op: PlockOp(raw.optype),
        ex: flag("ex", raw.ex)?,
        wait: flag("wait", raw.wait)?,
        flags: PlockFlags(raw.flags),
        pid: raw.pid.get(),
        nodeid: raw.nodeid.get(),
        rv: raw.rv.get(),
        fsid: raw.fsid.get(),
        number: raw.number.get(),
        start,
        end,
        owner: raw.owner.get(),
    })
}

/// Encodes one plock message (types 3–7) into a fixed array: the hot path allocates nothing.
pub fn encode_plock_msg(header: &DlmHeader, info: &PlockInfo) -> [u8; PLOCK_MSG_SIZE] {
    let mut out = [0u8; PLOCK_MSG_SIZE];
    out[..HEADER_SIZE].copy_from_slice(&header.encode());
    out[HEADER_SIZE..].copy_from_slice(RawPlockInfoLe::from(info).as_bytes());
    out
}
