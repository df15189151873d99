//! `struct dlmc_lockspace` (140 bytes) and `struct dlmc_change` (32 bytes), libdlmcontrol.h.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::QueryError;
use crate::{DLM_LOCKSPACE_LEN, LockspaceName};

/// `sizeof(struct dlmc_lockspace)`.
pub const LOCKSPACE_SIZE: usize = 140;

/// The C layout of `struct dlmc_change`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RawDlmcChange {
    /// `member_count`
    pub member_count: i32,
    /// `joined_count`
    pub joined_count: i32,
    /// `remove_count`
    pub remove_count: i32,
    /// `failed_count`
    pub failed_count: i32,
    /// `wait_condition`
    pub wait_condition: i32,
    /// `wait_messages`
    pub wait_messages: i32,
    /// `seq`
    pub seq: u32,
    /// `combined_seq`
    pub combined_seq: u32,
}

/// The C layout of `struct dlmc_lockspace` (3 bytes of tail padding made explicit).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RawDlmcLockspace {
    /// `cg_prev`
    pub cg_prev: RawDlmcChange,
    /// `cg_next`
    pub cg_next: RawDlmcChange,
    /// `flags`
    pub flags: u32,
    /// `global_id`
    pub global_id: u32,
    /// `name[DLM_LOCKSPACE_LEN+1]`
    pub name: [u8; DLM_LOCKSPACE_LEN + 1],
    /// tail padding
    pub pad: [u8; 3],
}

const _: () = assert!(size_of::<RawDlmcChange>() == 32);
const _: () = assert!(size_of::<RawDlmcLockspace>() == LOCKSPACE_SIZE);

/// What a pending change waits for (`DLMC_LS_WAIT_*`), or how many STARTs it misses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitCondition {
    /// Nothing (0).
    None,
    /// `DLMC_LS_WAIT_RINGID`
    Ringid,
    /// `DLMC_LS_WAIT_QUORUM`
    Quorum,
    /// `DLMC_LS_WAIT_FENCING`
    Fencing,
    /// `DLMC_LS_WAIT_FSDONE`
    FsDone,
    /// Any other value (the number of missing STARTs while waiting for messages).
    Other(i32),
}

impl WaitCondition {
    fn from_raw(v: i32) -> Self {
        match v {
            0 => Self::None,
            1 => Self::Ringid,
            2 => Self::Quorum,
            3 => Self::Fencing,
            4 => Self::FsDone,
            n => Self::Other(n),
        }
    }

    /// dlm_tool's word for it (`condition_str`): `ringid`, `quorum`, `fencing`, `fsdone`,
    /// or `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ringid => "ringid",
            Self::Quorum => "quorum",
            Self::Fencing => "fencing",
            Self::FsDone => "fsdone",
            Self::None | Self::Other(_) => "unknown",
        }
    }

    /// The C value.
    pub fn to_raw(self) -> i32 {
        match self {
            Self::None => 0,
            Self::Ringid => 1,
            Self::Quorum => 2,
            Self::Fencing => 3,
            Self::FsDone => 4,
            Self::Other(n) => n,
        }
    }
}

/// `struct dlmc_change`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DlmcChange {
    /// Members.
    pub member_count: i32,
    /// Joined.
    pub joined_count: i32,
    /// Removed.
    pub remove_count: i32,
    /// Failed.
    pub failed_count: i32,
    /// Wait condition (or missing STARTs when `wait_messages`).
    pub wait_condition: WaitCondition,
    /// Waiting for START messages.
    pub wait_messages: bool,
    /// Change sequence.
    pub seq: u32,
    /// Oldest change folded into this one.
    pub combined_seq: u32,
}

impl Default for DlmcChange {
    fn default() -> Self {
        Self::from_raw(&RawDlmcChange::default())
    }
}

impl DlmcChange {
    /// What a pending change waits for, in one word: `messages` while STARTs are missing,
    /// else [`WaitCondition::name`].
    pub fn wait_word(&self) -> &'static str {
        if self.wait_messages {
            "messages"
        } else {
            self.wait_condition.name()
        }
    }

    fn from_raw(r: &RawDlmcChange) -> Self {
        Self {
            member_count: r.member_count,
            joined_count: r.joined_count,
            remove_count: r.remove_count,
            failed_count: r.failed_count,
            wait_condition: WaitCondition::from_raw(r.wait_condition),
            wait_messages: r.wait_messages != 0,
            seq: r.seq,
            combined_seq: r.combined_seq,
        }
    }

    fn to_raw(self) -> RawDlmcChange {
        RawDlmcChange {
            member_count: self.member_count,
            joined_count: self.joined_count,
            remove_count: self.remove_count,
            failed_count: self.failed_count,
            wait_condition: self.wait_condition.to_raw(),
            wait_messages: i32::from(self.wait_messages),
            seq: self.seq,
            combined_seq: self.combined_seq,
        }
    }
}

/// `DLMC_LF_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LockspaceFlags(pub u32);

impl LockspaceFlags {
    /// `DLMC_LF_JOINING`
    pub const JOINING: u32 = 0x1;
    /// `DLMC_LF_LEAVING`
    pub const LEAVING: u32 = 0x2;
    /// `DLMC_LF_KERNEL_STOPPED`
    pub const KERNEL_STOPPED: u32 = 0x4;
    /// `DLMC_LF_FS_REGISTERED`
    pub const FS_REGISTERED: u32 = 0x8;
    /// `DLMC_LF_NEED_PLOCKS`
    pub const NEED_PLOCKS: u32 = 0x10;
    /// `DLMC_LF_SAVE_PLOCKS`
    pub const SAVE_PLOCKS: u32 = 0x20;

    /// Names in dlm_tool's order, for the bits that are set:
    /// `save_plock,need_plock,fs_reg,kern_stop,leave,join`.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        [
            (Self::SAVE_PLOCKS, "save_plock"),
            (Self::NEED_PLOCKS, "need_plock"),
            (Self::FS_REGISTERED, "fs_reg"),
            (Self::KERNEL_STOPPED, "kern_stop"),
            (Self::LEAVING, "leave"),
            (Self::JOINING, "join"),
        ]
        .into_iter()
        .filter(move |(bit, _)| self.0 & bit != 0)
        .map(|(_, n)| n)
    }
}

/// `struct dlmc_lockspace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DlmcLockspace {
    /// The started change.
    pub cg_prev: DlmcChange,
    /// The newest pending change.
    pub cg_next: DlmcChange,
    /// `DLMC_LF_*`.
    pub flags: LockspaceFlags,
    /// Global id.
    pub global_id: u32,
    /// Name.
    pub name: LockspaceName,
}

impl DlmcLockspace {
    /// The 140 bytes.
    pub fn encode(&self) -> [u8; LOCKSPACE_SIZE] {
        let mut name = [0u8; DLM_LOCKSPACE_LEN + 1];
        name[..DLM_LOCKSPACE_LEN].copy_from_slice(&self.name.to_c_buf());
        let raw = RawDlmcLockspace {
            cg_prev: self.cg_prev.to_raw(),
            cg_next: self.cg_next.to_raw(),
            flags: self.flags.0,
            global_id: self.global_id,
            name,
            pad: [0; 3],
        };
        let mut out = [0u8; LOCKSPACE_SIZE];
        out.copy_from_slice(raw.as_bytes());
        out
    }

    /// Decodes 140 bytes (more are ignored).
    pub fn decode(bytes: &[u8]) -> Result<Self, QueryError> {
        let (raw, _) = RawDlmcLockspace::read_from_prefix(bytes)
            .map_err(|_| QueryError::Short(bytes.len()))?;
        Ok(Self {
            cg_prev: DlmcChange::from_raw(&raw.cg_prev),
            cg_next: DlmcChange::from_raw(&raw.cg_next),
            flags: LockspaceFlags(raw.flags),
            global_id: raw.global_id,
            name: LockspaceName::from_c_buf(&raw.name)?,
        })
    }
}
