//! FENCE_RESULT (14) and FENCE_CLEAR (15): header with version 0.0.0 and
//! `struct fence_result` (1024 bytes). 1064 bytes in all (daemon_cpg.c).

use zerocopy::little_endian::{I32, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::{DlmHeader, HEADER_SIZE, MsgType, Version3, WireError};

/// Whole message size.
pub const FENCE_RESULT_SIZE: usize = HEADER_SIZE + 1024;

/// The C layout of `struct fence_result`.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RawFenceResult {
    /// `version` (0, unused)
    pub version: U32,
    /// `flags` (`FR_*`)
    pub flags: U32,
    /// `nodeid`: the node fenced or cleared
    pub nodeid: U32,
    /// `result` (written from an int)
    pub result: I32,
    /// `fence_walltime`: time(2) seconds
    pub fence_walltime: U64,
    /// `unused[1000]`
    pub unused: [u8; 1000],
}

const _: () = assert!(size_of::<RawFenceResult>() == 1024);

/// `FR_*` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FenceFlags(pub u32);

impl FenceFlags {
    /// `FR_FIPU`: fencing in progress unknown.
    pub const FIPU: u32 = 1;
    /// `FR_CLEAR_STARTUP`
    pub const CLEAR_STARTUP: u32 = 2;
    /// `FR_CLEAR_FIPU`
    pub const CLEAR_FIPU: u32 = 4;
}

/// A fence outcome (or a clear).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FenceResult {
    /// `FR_*` flags.
    pub flags: FenceFlags,
    /// Subject node.
    pub nodeid: u32,
    /// 0 success, agent exit status, -1 signal, negative errno (-125 for `fence_ack`).
    pub result: i32,
    /// Wall-clock seconds of the fencing.
    pub fence_walltime: u64,
}

impl FenceResult {
    /// Decodes the payload after the header; C rejects messages shorter than 1064 bytes.
    pub fn decode(payload: &[u8]) -> Result<Self, WireError> {
        let (raw, _) = RawFenceResult::read_from_prefix(payload).map_err(|_| WireError::Short {
            what: "fence_result",
            need: FENCE_RESULT_SIZE,
            got: HEADER_SIZE + payload.len(),
        })?;
        Ok(Self {
            flags: FenceFlags(raw.flags.get()),
            nodeid: raw.nodeid.get(),
            result: raw.result.get(),
            fence_walltime: raw.fence_walltime.get(),
        })
    }

    /// The 1064-byte message of type `msg_type` (FENCE_RESULT or FENCE_CLEAR) from `nodeid`.
    pub fn encode(&self, msg_type: MsgType, nodeid: u32) -> Vec<u8> {
        let header = DlmHeader::new(Version3::default(), msg_type, nodeid);
        let raw = RawFenceResult {
            version: U32::new(0),
            flags: U32::new(self.flags.0),
            nodeid: U32::new(self.nodeid),
            result: I32::new(self.result),
            fence_walltime: U64::new(self.fence_walltime),
            unused: [0; 1000],
        };
        let mut out = Vec::with_capacity(FENCE_RESULT_SIZE);
        out.extend_from_slice(&header.encode());
        out.extend_from_slice(raw.as_bytes());
        out
    }
}
