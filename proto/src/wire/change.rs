//! START (type 2) and PLOCKS_DONE (type 8): `struct ls_info` (32 bytes) followed by
//! `id_info_count` entries of `id_info_size` bytes, each starting with a member nodeid.

use zerocopy::little_endian::{I32, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::{DlmHeader, HEADER_SIZE, WireError};
use crate::MAX_NODES;

/// `sizeof(struct ls_info)`.
pub const LS_INFO_SIZE: usize = 32;

/// The C layout of `struct ls_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RawLsInfo {
    /// `ls_info_size` (32)
    pub ls_info_size: U32,
    /// `id_info_size` (4)
    pub id_info_size: U32,
    /// `id_info_count`
    pub id_info_count: U32,
    /// `started_count`
    pub started_count: U32,
    /// `member_count`
    pub member_count: I32,
    /// `joined_count`
    pub joined_count: I32,
    /// `remove_count`
    pub remove_count: I32,
    /// `failed_count`
    pub failed_count: I32,
}

const _: () = assert!(size_of::<RawLsInfo>() == LS_INFO_SIZE);

/// A membership change as announced in START and PLOCKS_DONE.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Change {
    /// The sender's `started_count` (0 before its first start).
    pub started_count: u32,
    /// Members in the change.
    pub member_count: i32,
    /// Joined in the change.
    pub joined_count: i32,
    /// Removed in the change.
    pub remove_count: i32,
    /// Failed in the change.
    pub failed_count: i32,
    /// Member nodeids, in the sender's order.
    pub members: Vec<i32>,
}

impl Change {
    /// Decodes the payload after the header. Steps through ids with the received
    /// `id_info_size` (as C, for forward compatibility).
    pub fn decode(payload: &[u8]) -> Result<Self, WireError> {
        let (raw, ids) = RawLsInfo::read_from_prefix(payload).map_err(|_| WireError::Short {
            what: "ls_info",
            need: HEADER_SIZE + LS_INFO_SIZE,
            got: HEADER_SIZE + payload.len(),
        })?;
        let size = raw.id_info_size.get();
        let count = raw.id_info_count.get();
        if size < 4 {
            return Err(WireError::field(
                "id_info_size",
                size,
                "smaller than a nodeid",
            ));
        }
        if count as usize > MAX_NODES {
            return Err(WireError::field(
                "id_info_count",
                count,
                "more than 128 members",
            ));
        }
        let need = (size as usize).saturating_mul(count as usize);
        if ids.len() < need {
            return Err(WireError::Short {
                what: "id_info array",
                need: HEADER_SIZE + LS_INFO_SIZE + need,
                got: HEADER_SIZE + payload.len(),
            });
        }
        let members = ids
            .chunks_exact(size as usize)
            .take(count as usize)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(Self {
            started_count: raw.started_count.get(),
            member_count: raw.member_count.get(),
            joined_count: raw.joined_count.get(),
            remove_count: raw.remove_count.get(),
            failed_count: raw.failed_count.get(),
            members,
        })
    }

    /// Encodes header + body as C's `send_info()` builds them (id_info_size 4).
    pub fn encode(&self, header: &DlmHeader) -> Vec<u8> {
        let count = u32::try_from(self.members.len()).unwrap_or(u32::MAX);
        let raw = RawLsInfo {
            ls_info_size: U32::new(32),
            id_info_size: U32::new(4),
            id_info_count: U32::new(count),
            started_count: U32::new(self.started_count),
            member_count: I32::new(self.member_count),
            joined_count: I32::new(self.joined_count),
            remove_count: I32::new(self.remove_count),
            failed_count: I32::new(self.failed_count),
        };
        let mut out = Vec::with_capacity(HEADER_SIZE + LS_INFO_SIZE + 4 * self.members.len());
        out.extend_from_slice(&header.encode());
        out.extend_from_slice(raw.as_bytes());
        for m in &self.members {
            out.extend_from_slice(&m.to_le_bytes());
        }
        out
    }
}
