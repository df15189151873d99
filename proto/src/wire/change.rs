//! START (type 2) and PLOCKS_DONE (type 8): `struct ls_info` (32 bytes) followed by
//! `id_info_count` entries of `id_info_size` bytes, each starting with a member nodeid.
//! This project's START uses C's room for larger entries: 12 bytes, the member's
//! incarnation after its nodeid (C steps over it), so a START sent for a change before a
//! node's daemon restarted or joined again cannot be taken for one of its new time.

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
    /// The members' incarnations, in the same order, when the entries carry them
    /// (id_info_size 12 or more: a daemon of ours); empty otherwise (C sends 4).
    pub incarnations: Vec<Incarnation>,
}

/// A member's time in the lockspace as our START names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Incarnation {
    /// Its daemon's CPG process id.
    pub pid: u32,
    /// The number its daemon drew when it joined, as the sender knows it (0: not yet).
    pub nonce: u32,
}

/// The entry size of this project's START: nodeid, CPG process id, nonce.
pub const ID_INFO_SIZE_OURS: u32 = 12;

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
        let entries = ids.chunks_exact(size as usize).take(count as usize);
        let members = entries
            .clone()
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let word = |c: &[u8], i: usize| u32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
        let incarnations = if size >= ID_INFO_SIZE_OURS {
            entries
                .map(|c| Incarnation {
                    pid: word(c, 4),
                    nonce: word(c, 8),
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(Self {
            started_count: raw.started_count.get(),
            member_count: raw.member_count.get(),
            joined_count: raw.joined_count.get(),
            remove_count: raw.remove_count.get(),
            failed_count: raw.failed_count.get(),
            members,
            incarnations,
        })
    }

    /// Encodes header + body as C's `send_info()` builds them: id_info_size 4, or 12 with
    /// the incarnations when there is one for every member.
    pub fn encode(&self, header: &DlmHeader) -> Vec<u8> {
        let count = u32::try_from(self.members.len()).unwrap_or(u32::MAX);
        let ours = !self.members.is_empty() && self.incarnations.len() == self.members.len();
        let size = if ours { ID_INFO_SIZE_OURS } else { 4 };
        let raw = RawLsInfo {
            ls_info_size: U32::new(32),
            id_info_size: U32::new(size),
            id_info_count: U32::new(count),
            started_count: U32::new(self.started_count),
            member_count: I32::new(self.member_count),
            joined_count: I32::new(self.joined_count),
            remove_count: I32::new(self.remove_count),
            failed_count: I32::new(self.failed_count),
        };
        let mut out =
            Vec::with_capacity(HEADER_SIZE + LS_INFO_SIZE + size as usize * self.members.len());
        out.extend_from_slice(&header.encode());
        out.extend_from_slice(raw.as_bytes());
        for (i, m) in self.members.iter().enumerate() {
            out.extend_from_slice(&m.to_le_bytes());
            if ours {
                let inc = self.incarnations.get(i).copied().unwrap_or_default();
                out.extend_from_slice(&inc.pid.to_le_bytes());
                out.extend_from_slice(&inc.nonce.to_le_bytes());
            }
        }
        out
    }
}
